package timingwheel

// arity: a 4-ary heap has half the levels of a binary one, and a node's children share cache
// lines.
const arity = 4

// elem is one heap element, 16 bytes: the ordering key inline, so that sifting reads only the
// heap.
type elem struct {
	due int64
	seq uint32 // compared with wrap-around: see before
	i   int32  // node
}

// before orders by due, then seq. Seqs wrap at 2^32 and are compared by their signed distance,
// so only the order of two ties put 2^31 or more puts apart can come out reversed.
func (a elem) before(b elem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return int32(a.seq-b.seq) < 0
}

// heap is a 4-ary min-heap ordered by (due, seq); each node knows its position.
type heap []elem

func (h heap) set(nodes *slab, p int, e elem) {
	h[p] = e
	nodes.at(e.i).pos = int32(p)
}

func (h *heap) push(nodes *slab, e elem) {
	*h = append(*h, e)
	h.up(nodes, len(*h)-1)
}

func (h *heap) removeAt(nodes *slab, p int) {
	last := len(*h) - 1
	if p != last {
		h.set(nodes, p, (*h)[last])
	}
	*h = (*h)[:last]
	if p < last {
		h.down(nodes, p)
		h.up(nodes, p)
	}
	if cap(*h) > 1<<16 && len(*h) < cap(*h)/4 { // let a drained backlog's heap go
		*h = append(heap(nil), *h...)
	}
}

func (h heap) up(nodes *slab, p int) {
	e := h[p]
	for p > 0 {
		parent := (p - 1) / arity
		if !e.before(h[parent]) {
			break
		}
		h.set(nodes, p, h[parent])
		p = parent
	}
	h.set(nodes, p, e)
}

func (h heap) down(nodes *slab, p int) {
	n := len(h)
	e := h[p]
	for {
		first := arity*p + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < first+arity && k < n; k++ {
			if h[k].before(h[c]) {
				c = k
			}
		}
		if !h[c].before(e) {
			break
		}
		h.set(nodes, p, h[c])
		p = c
	}
	h.set(nodes, p, e)
}

// countDue adds to n the entries of kind due at or before t, and lowers earliest to the
// earliest of them (when n was 0, sets it); it visits only entries due by then (and their
// children), not the whole heap.
func (h heap) countDue(nodes *slab, t int64, kind uint8, n *int, earliest *int64) {
	var buf [64]int
	stack := buf[:0]
	if len(h) > 0 {
		stack = append(stack, 0)
	}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p >= len(h) || h[p].due > t {
			continue
		}
		if nodes.at(h[p].i).kind == kind {
			if *n == 0 || h[p].due < *earliest {
				*earliest = h[p].due
			}
			*n++
		}
		for c := arity*p + 1; c <= arity*p+arity; c++ {
			stack = append(stack, c)
		}
	}
}
