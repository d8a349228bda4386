package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// checkAuth refuses combinations of the authentication and TLS flags that nats.go would take
// silently as something else, or not at all.
func checkAuth(o options) error {
	switch {
	case o.user != "" && o.password == "":
		return errors.New("--user needs --password (for a token, use --token)")
	case o.password != "" && o.user == "":
		return errors.New("--password needs --user")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("--tlscert and --tlskey go together: a client certificate needs its key")
	}
	return nil
}

// Client pings: a connection whose server stops answering (a network partition that leaves the
// TCP connection open, a hung server) counts as down at the first ping tick that finds pingsOut
// pings unanswered: about pingsOut+1 ping intervals (30 s) after the last answer, which is 20 to
// 30 s after the server stopped answering, rather than the 4 to 6 minutes of nats.go's defaults
// (a ping every 2 min). Until then /readyz says ready (the replica stops claiming sooner: its
// heartbeats go unconfirmed within the partition lease); once the connection is down, /readyz
// says not ready, the replica gives up its partitions a quarter of a partition lease later unless
// it is back, and the client reconnects.
const (
	pingInterval = 10 * time.Second
	pingsOut     = 2
)

// connect opens the bridge's connection: to the embedded server ns if there is one, else to
// --nats-url, with the authentication and TLS the flags give, then extra (which tests use to
// shorten the pings). Nothing it logs or returns carries a secret: URLs are written with their
// password redacted, and no option value is logged.
func connect(o options, ns *server.Server, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("axbridge"),
		nats.MaxReconnects(-1),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(pingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("NATS error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("NATS error", "err", err)
		}),
	}
	addr := o.natsURL
	if ns != nil {
		addr = ns.ClientURL()
		opts = append(opts, nats.InProcessServer(ns))
	}
	if o.creds != "" {
		opts = append(opts, nats.UserCredentials(o.creds))
	}
	if o.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", o.nkey, err)
		}
		opts = append(opts, opt)
	}
	if o.user != "" {
		opts = append(opts, nats.UserInfo(o.user, o.password))
	}
	if o.token != "" {
		opts = append(opts, nats.Token(o.token))
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	nc, err := nats.Connect(addr, append(opts, extra...)...)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		// url.Parse's error quotes the whole URL, password and all.
		return nil, fmt.Errorf("connect to NATS at %s: invalid URL", redactURLs(addr))
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURLs(addr), err)
	}
	log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
	return nc, nil
}

// redactURLs writes a comma-separated list of server URLs with any password replaced by "xxxxx";
// a user name alone (which nats.go takes as a token) is replaced too.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p // as nats.go reads it
		}
		u, err := url.Parse(p)
		switch {
		case err != nil:
			parts[i] = "(unparsable URL)" // url.Parse errors quote the input
		case u.User != nil:
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("xxxxx")
			}
			parts[i] = u.Redacted()
		default:
			parts[i] = p
		}
	}
	return strings.Join(parts, ",")
}
