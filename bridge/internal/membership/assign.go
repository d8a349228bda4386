package membership

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// Assign gives each of n partitions an owner among members (sorted, distinct), each member
// ⌊n/len⌋ or ⌈n/len⌉ of them: rendezvous hashing with bounded loads (doc.go).
func Assign(members []string, n int) []string {
	owner := make([]string, n)
	if len(members) == 0 {
		return owner
	}
	type pair struct {
		score uint64
		m     int
		p     int
	}
	pairs := make([]pair, 0, len(members)*n)
	for i, m := range members {
		for p := range n {
			pairs = append(pairs, pair{score(m, p), i, p})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			if a.score > b.score {
				return -1
			}
			return 1
		case a.m != b.m:
			return a.m - b.m
		}
		return a.p - b.p
	})
	base, extra := n/len(members), n%len(members)
	load := make([]int, len(members))
	big := 0 // members holding base+1
	for _, pr := range pairs {
		if owner[pr.p] != "" {
			continue
		}
		switch l := load[pr.m]; {
		case l < base:
		case l == base && big < extra:
			big++
		default:
			continue
		}
		load[pr.m]++
		owner[pr.p] = members[pr.m]
	}
	return owner
}

// score is a stable hash of (member, partition): FNV-1a 64 finished with splitmix64's mixer.
func score(member string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	var buf [9]byte
	buf[0] = '/'
	binary.BigEndian.PutUint64(buf[1:], uint64(p))
	h.Write(buf[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// share returns, by partition, whether self owns it when live (sorted) are the members.
func share(live []string, n int, self string) []bool {
	parts := make([]bool, n)
	for p, m := range Assign(live, n) {
		parts[p] = m == self
	}
	return parts
}

func count(parts []bool) int {
	n := 0
	for _, ok := range parts {
		if ok {
			n++
		}
	}
	return n
}
