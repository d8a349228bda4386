package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/axbridge/axbridge/internal/natstest"
)

// These tests run the binary's own run(): its flags, its connection code, its logger at debug
// level. Each secure setup is proven by a task that fires through a bridge connected with it; each
// refusal by run failing to connect; and no log line or error of any run carries a secret.

// TLS with a CA made here: --tlsca with that CA connects (a task fires), another CA is refused.
func TestTLSWithCA(t *testing.T) {
	t.Parallel()
	p, other := newPKI(t, "ax"), newPKI(t, "other")
	srv := natstest.RunServer(t, withTLS(t, p, false))
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)

	runBridge(t, "--nats-url", url, "--tlsca", p.ca)
	fires(t, url, nats.RootCAs(p.ca))

	_, err := runRefused(t, "--nats-url", url, "--tlsca", other.ca)
	if !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("err %v, want the server's certificate refused as signed by an unknown authority", err)
	}
}

// Mutual TLS (the server verifies client certificates): without one the connection is refused;
// with --tlscert/--tlskey it works.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t, "ax")
	srv := natstest.RunServer(t, withTLS(t, p, true))
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)

	if _, err := runRefused(t, "--nats-url", url, "--tlsca", p.ca); !strings.Contains(err.Error(), "tls") {
		t.Errorf("err %v, want a TLS error", err)
	}
	runBridge(t, "--nats-url", url, "--tlsca", p.ca, "--tlscert", p.clientCert, "--tlskey", p.clientKey)
	fires(t, url, nats.RootCAs(p.ca), nats.ClientCert(p.clientCert, p.clientKey))
}

// NKey authentication with --nkey (a seed file); another key is refused; the seed is never logged.
func TestNKeyAuth(t *testing.T) {
	t.Parallel()
	user, seedFile, seed := newNKey(t)
	_, otherFile, otherSeed := newNKey(t)
	pub, _ := user.PublicKey()
	srv := natstest.RunServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })

	logs := runBridge(t, "--nats-url", srv.ClientURL(), "--nkey", seedFile)
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	fires(t, srv.ClientURL(), opt)

	refusedLog, err := runRefused(t, "--nats-url", srv.ClientURL(), "--nkey", otherFile)
	noSecrets(t, []string{logs.String(), refusedLog, err.Error()}, seed, otherSeed)
}

func newNKey(t *testing.T) (nkeys.KeyPair, string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "bridge.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return kp, file, string(seed)
}

// User and password: the right ones connect; a wrong password, also one in the URL, is refused;
// neither password appears in any log line or error.
func TestUserPassword(t *testing.T) {
	t.Parallel()
	const password, wrong = "s3cret-Passw0rd-right", "s3cret-Passw0rd-wrong"
	srv := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: password}}
	})
	url := srv.ClientURL()
	hostURL := strings.TrimPrefix(url, "nats://")

	logs := runBridge(t, "--nats-url", url, "--user", "bridge", "--password", password)
	fires(t, url, nats.UserInfo("bridge", password))

	// The password in the URL instead: logged as connected, with the password redacted.
	inURL := runBridge(t, "--nats-url", "nats://bridge:"+password+"@"+hostURL, "--replica-id", "sec-url")
	if !strings.Contains(inURL.String(), `"msg":"connected to NATS"`) {
		t.Errorf("no connected line in\n%s", inURL)
	}

	// A server restart: both bridges log the disconnect and the reconnect, URL included.
	srv.Restart(t)
	for _, l := range []*logBuffer{logs, inURL} {
		if !poll(30*time.Second, func() bool { return strings.Contains(l.String(), `"msg":"NATS reconnected"`) }) {
			t.Fatalf("no reconnect logged in\n%s", l)
		}
	}

	texts := []string{logs.String(), inURL.String()}
	for _, args := range [][]string{
		{"--nats-url", url, "--user", "bridge", "--password", wrong},
		{"--nats-url", "nats://bridge:" + wrong + "@" + hostURL},
		{"--nats-url", "bridge:" + wrong + "@" + hostURL + ",nats://" + wrong + "@" + hostURL},
	} {
		log, err := runRefused(t, args...)
		if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("err %v, want an authorization error", err)
		}
		texts = append(texts, log, err.Error())
	}
	noSecrets(t, texts, password, wrong)
}

// A token (--token) connects; a wrong one is refused; neither is logged.
func TestToken(t *testing.T) {
	t.Parallel()
	const token, wrong = "tok-3f9a1c-right", "tok-3f9a1c-wrong"
	srv := natstest.RunServer(t, func(o *server.Options) { o.Authorization = token })

	logs := runBridge(t, "--nats-url", srv.ClientURL(), "--token", token)
	fires(t, srv.ClientURL(), nats.Token(token))
	refusedLog, err := runRefused(t, "--nats-url", srv.ClientURL(), "--token", wrong)
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("err %v, want an authorization error", err)
	}
	noSecrets(t, []string{logs.String(), refusedLog, err.Error()}, token, wrong)
}

// A creds file (user JWT and seed) on a server in operator mode: an operator, an account with
// JetStream and a user made here, the account JWT in a memory resolver. The bridge connects with
// --creds and fires a task; the seed and the JWT are never logged.
func TestCredsFile(t *testing.T) {
	t.Parallel()
	operator, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := operator.PublicKey()
	opClaims := jwt.NewOperatorClaims(opPub)
	opJWT, err := opClaims.Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	opDecoded, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	account := func(name string, js bool) (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateAccount()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		aj, err := ac.Encode(operator)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(pub, aj); err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	_, sysPub := account("SYS", false)
	app, _ := account("APP", true)
	userCreds := func(name string) (file, userJWT, seed string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		uc := jwt.NewUserClaims(pub)
		uc.Name = name
		if userJWT, err = uc.Encode(app); err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		creds, err := jwt.FormatUserConfig(userJWT, s)
		if err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(t.TempDir(), name+".creds")
		if err := os.WriteFile(file, creds, 0o600); err != nil {
			t.Fatal(err)
		}
		return file, userJWT, string(s)
	}
	bridgeCreds, bridgeJWT, bridgeSeed := userCreds("bridge")
	clientCreds, _, _ := userCreds("client")

	srv := natstest.RunServer(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opDecoded}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	})
	logs := runBridge(t, "--nats-url", srv.ClientURL(), "--creds", bridgeCreds)
	fires(t, srv.ClientURL(), nats.UserCredentials(clientCreds))
	// The JWT's signature part, and the seed, are what a reader of the log could use.
	sig := bridgeJWT[strings.LastIndex(bridgeJWT, ".")+1:]
	noSecrets(t, []string{logs.String()}, bridgeSeed, sig)
}

// Authentication flags that nats.go would take as something else, or ignore, are errors.
func TestAuthFlagsPaired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "ann"}, "--user needs --password"},
		{[]string{"--password", "pw"}, "--password needs --user"},
		{[]string{"--tlscert", "c.pem"}, "--tlscert and --tlskey"},
		{[]string{"--tlskey", "k.pem"}, "--tlscert and --tlskey"},
	} {
		err := run(context.Background(), bridgeArgs(t, append([]string{"--nats-url", "nats://127.0.0.1:1"}, tc.args...)...), &logBuffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A URL that does not parse is reported without its password (url.Parse's error quotes it whole).
func TestMalformedURLHidesPassword(t *testing.T) {
	t.Parallel()
	var log logBuffer
	err := run(context.Background(), bridgeArgs(t, "--nats-url", "nats://bridge:s3cret-0xfeed%zz@127.0.0.1:1"), &log)
	if err == nil || !strings.Contains(err.Error(), "invalid URL") {
		t.Fatalf("err %v, want an invalid URL error", err)
	}
	noSecrets(t, []string{err.Error(), log.String()}, "s3cret-0xfeed")
}

// -h lists the flags with their defaults, not with values taken from the environment.
func TestHelpShowsNoSecrets(t *testing.T) {
	t.Setenv("AX_PASSWORD", "env-password-0xdead")
	t.Setenv("AX_TOKEN", "env-token-0xbeef")
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &out); err == nil || !strings.Contains(out.String(), "-password") {
		t.Fatalf("-h: err %v, output %q", err, out.String())
	}
	noSecrets(t, []string{out.String()}, "env-password-0xdead", "env-token-0xbeef")
}

// The binary as the compose file runs it: user bridge of docker/nats/auth.conf (the file itself,
// passwords from the environment). A task scheduled by the file's producer fires to its
// consumer, whose AckSync the bridge answers, and the bridge logs no error: no permission it
// needs is missing from the file.
func TestBinaryUnderBridgeRole(t *testing.T) {
	pw := map[string]string{}
	for _, user := range []string{"bridge", "producer", "consumer", "operator"} {
		pw[user] = "role-" + user + "-" + nats.NewInbox()[len(nats.InboxPrefix):]
		t.Setenv("AX_"+strings.ToUpper(user)+"_PASSWORD", pw[user])
	}
	parsed, err := server.ProcessConfigFile("../../docker/nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t, func(o *server.Options) { o.Users = parsed.Users })
	url := srv.ClientURL()
	logs := runBridge(t, "--nats-url", url, "--user", "bridge", "--password", pw["bridge"])

	cons := natstest.Connect(t, url, nats.UserInfo("consumer", pw["consumer"]), nats.CustomInboxPrefix("_INBOX_consumer"))
	acked := make(chan error, 1)
	if _, err := cons.QueueSubscribe("ax.fire.order", "workers", func(m *nats.Msg) { acked <- m.AckSync() }); err != nil {
		t.Fatal(err)
	}
	if err := cons.Flush(); err != nil {
		t.Fatal(err)
	}
	prod := natstest.Connect(t, url, nats.UserInfo("producer", pw["producer"]), nats.CustomInboxPrefix("_INBOX_producer"))
	js, err := jetstream.New(prod)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "ax.schedule.order", []byte("o")); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("AckSync: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fire")
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("the bridge logged errors:\n%s", logs)
	}
	noSecrets(t, []string{logs.String()}, pw["bridge"])
}
