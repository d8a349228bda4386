package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// replicaIDFile holds the derived replica id inside --data-dir, so a restarted process keeps it.
const replicaIDFile = "replica-id"

// maxHostPart bounds the host name's part of a derived id (ids are at most 64 characters).
const maxHostPart = 55

// replicaID is the id this process runs as: the flag's when given; otherwise the one kept in
// dataDir, or a new one made of the host name (sanitised to [A-Za-z0-9_-]) and 8 random hex
// digits, written there for the next start. Two processes on one host with their own data dirs get
// different ids; a restarted one keeps its own, so it can settle the claims it had in flight. When
// the id cannot be kept, warn is told why and the id is the new one all the same.
func replicaID(flagID, dataDir string, hostname func() (string, error), warn func(msg string, args ...any)) (string, error) {
	if flagID != "" {
		return flagID, nil
	}
	path := filepath.Join(dataDir, replicaIDFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("replica id: %w (set --replica-id)", err)
	}
	host, err := hostname()
	if err != nil || host == "" {
		host = "axbridge"
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", fmt.Errorf("replica id: %w", err)
	}
	id := sanitizeID(host) + "-" + hex.EncodeToString(suffix[:])
	if err := os.MkdirAll(dataDir, 0o755); err == nil {
		err = os.WriteFile(path, []byte(id+"\n"), 0o644)
	}
	if err != nil {
		warn("replica id not kept: a restart will use another; set --replica-id", "replica", id, "err", err)
	}
	return id, nil
}

// sanitizeID maps a host name onto [A-Za-z0-9_-], at most maxHostPart characters.
func sanitizeID(host string) string {
	host, _, _ = strings.Cut(host, ".") // the short name: dots are not allowed in an id
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > maxHostPart {
		b = b[:maxHostPart]
	}
	if len(b) == 0 {
		return "axbridge"
	}
	return string(b)
}
