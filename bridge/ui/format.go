package ui

import (
	"encoding/base64"
	"sort"
	"strconv"
	"strings"
)

func sortRows(rs []bizRow) { sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name }) }

// Ranges writes sorted partitions compactly, as 0-4, 9, 12-13: the page's and the CLI's way.
func Ranges(ps []int) string {
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if s := strconv.Itoa(ps[i]); j > i {
			parts = append(parts, s+"-"+strconv.Itoa(ps[j]))
		} else {
			parts = append(parts, s)
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// preview is the start of a task's payload, as text.
func preview(t task) string {
	p := "base64:" + base64.StdEncoding.EncodeToString(t.PayloadBinary)
	if t.Payload != nil {
		p = *t.Payload
	}
	if r := []rune(p); len(r) > 80 {
		return string(r[:79]) + "…"
	}
	if t.PayloadCut {
		return p + "…"
	}
	return p
}
