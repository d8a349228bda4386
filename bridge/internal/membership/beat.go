package membership

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// beat is a heartbeat's value: "<nonce> <seq>", and " fenced" when its writer owns nothing. The
// nonce is random per process, so that a replica sees another process write its key; seq orders
// one process's heartbeats, which do not wait for one another and may land out of order.
type beat struct {
	nonce  string
	seq    uint64
	fenced bool
}

func (b beat) value() []byte {
	v := b.nonce + " " + strconv.FormatUint(b.seq, 10)
	if b.fenced {
		v += " fenced"
	}
	return []byte(v)
}

// parseBeat reads a heartbeat's value; an empty one (an older bridge's) owns its share.
func parseBeat(v []byte) beat {
	f := strings.Fields(string(v))
	var b beat
	if len(f) > 0 {
		b.nonce = f[0]
	}
	if len(f) > 1 {
		b.seq, _ = strconv.ParseUint(f[1], 10, 64)
	}
	b.fenced = len(f) > 2 && f[2] == "fenced"
	return b
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
