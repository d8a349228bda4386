#!/usr/bin/env bash
# abwheels.sh OLD [NEW]: time the wheel's Add (and Remove by id) of two
# versions of the timingwheel package in one process, where the machine's
# drift falls on both alike.
#
# OLD and NEW are commits (NEW defaults to the working tree). Each version's
# package is copied into a scratch module as package old or new, so both are
# instantiated from another package, as the bench module and the bridge do.
# Four wheels hold 1M pending each, two of each version; batches of 1024 adds
# (fresh ids, one clock read per 64) and 1024 cancels by id of random pending
# entries rotate among them, after a warm-up past the first sweep; eight
# windows of 300 rounds are timed. Two of the four positions run a few percent
# faster whatever code they hold, so the test runs twice with the versions in
# swapped positions, and the script prints the geometric mean of the two
# median ratios (new / old). The same code on both sides gave 0.97-1.09 over
# nine runs: differences smaller than that are noise.
# About a minute, and 2 GB of memory.
set -euo pipefail

old=${1:?usage: abwheels.sh OLD [NEW]}
new=${2:-}
root=$(git rev-parse --show-toplevel)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

copy() { # copy REV DEST: the package's non-test sources at REV (or the working tree)
	mkdir -p "$dir/$2"
	if [ -z "$1" ]; then
		for f in "$root"/timingwheel/*.go "$root"/timingwheel/*.s; do
			case $f in *_test.go) ;; *) cp "$f" "$dir/$2/" ;; esac
		done
	else
		for f in $(git -C "$root" ls-tree --name-only "$1" timingwheel/); do
			case $f in *_test.go) ;; *.go | *.s) git -C "$root" show "$1:$f" >"$dir/$2/$(basename "$f")" ;; esac
		done
	fi
	sed -i "s/^package timingwheel\$/package $2/" "$dir/$2"/*.go
}
copy "$old" old
copy "$new" new

cat >"$dir/go.mod" <<'EOF'
module abwheels

go 1.26
EOF

cat >"$dir/ab_test.go" <<'EOF'
package abwheels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"abwheels/new"
	"abwheels/old"
)

type wheel interface {
	Add(id string, due time.Time, v uint32)
	Remove(id string) bool
}

func TestAB(t *testing.T) {
	const pending, extra = 1_000_000, 300_000
	ids := make([]string, pending+extra)
	for k := range ids {
		ids[k] = fmt.Sprintf("order-%016x", uint64(k)*0x9e3779b97f4a7c15)
	}
	type side struct {
		w           wheel
		isNew       bool
		live, free  []int
		r           *rand.Rand
		add, remove time.Duration
		n           int
	}
	mk := func(isNew bool) *side {
		s := &side{isNew: isNew, r: rand.New(rand.NewPCG(7, 7))}
		if isNew {
			s.w = new.New[uint32](time.Now(), new.Options{})
		} else {
			s.w = old.New[uint32](time.Now(), old.Options{})
		}
		for k := range pending {
			s.w.Add(ids[k], time.Now().Add(30*time.Second), uint32(k))
			s.live = append(s.live, k)
		}
		for k := pending; k < pending+extra; k++ {
			s.free = append(s.free, k)
		}
		return s
	}
	sides := []*side{mk(false), mk(true), mk(true), mk(false)}
	if os.Getenv("AB_SWAP") != "" {
		sides = []*side{mk(true), mk(false), mk(false), mk(true)}
	}
	batch := make([]string, 1024)
	ks := make([]int, 1024)
	step := func(s *side, timed bool) {
		for j := range batch {
			k := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			ks[j] = k
			batch[j] = strings.Clone(ids[k])
		}
		t0 := time.Now()
		now := t0
		for j, id := range batch {
			if j%64 == 0 {
				now = time.Now()
			}
			s.w.Add(id, now.Add(30*time.Second), uint32(j))
		}
		d := time.Since(t0)
		s.live = append(s.live, ks...)
		for j := range batch {
			x := s.r.IntN(len(s.live))
			k := s.live[x]
			batch[j] = strings.Clone(ids[k])
			s.live[x] = s.live[len(s.live)-1]
			s.live = s.live[:len(s.live)-1]
			s.free = append(s.free, k)
		}
		t1 := time.Now()
		for _, id := range batch {
			s.w.Remove(id)
		}
		if timed {
			s.add += d
			s.remove += time.Since(t1)
			s.n += len(batch)
		}
	}
	for range 1200 {
		for _, s := range sides {
			step(s, false)
		}
	}
	for win := range 8 {
		for _, s := range sides {
			s.add, s.remove, s.n = 0, 0, 0
		}
		for round := range 300 {
			for j := range sides {
				step(sides[(j+round)%len(sides)], true)
			}
		}
		var ao, an, ro, rn time.Duration
		var no, nn int
		for _, s := range sides {
			if s.isNew {
				an, rn, nn = an+s.add, rn+s.remove, nn+s.n
			} else {
				ao, ro, no = ao+s.add, ro+s.remove, no+s.n
			}
		}
		a0, a1 := float64(ao)/float64(no), float64(an)/float64(nn)
		r0, r1 := float64(ro)/float64(no), float64(rn)/float64(nn)
		t.Logf("window %d: add old %.1f new %.1f ns addratio %.3f; remove old %.1f new %.1f ns removeratio %.3f",
			win, a0, a1, a1/a0, r0, r1, r1/r0)
	}
}
EOF

cd "$dir"
run() { go test -run TestAB -v -count=1 . 2>&1 | grep -E 'window|FAIL|panic' || true; }
echo "== positions 1-2 new"
p=$(run)
echo "$p"
echo "== positions 0,3 new"
q=$(AB_SWAP=1 run)
echo "$q"
median() { grep -o "$1 [0-9.]*" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
for m in addratio removeratio; do
	a=$(echo "$p" | median $m)
	b=$(echo "$q" | median $m)
	awk -v a="$a" -v b="$b" -v m="$m" 'BEGIN {printf "%s: medians %.3f and %.3f, geometric mean %.3f\n", m, a, b, sqrt(a*b)}'
done
