package timingwheel

// arity: a 4-ary heap has half the levels of a binary one, and a node's children share cache
// lines.
const arity = 4

// elem is one heap element: the ordering key inline, so that sifting reads only the heap.
type elem struct {
	due int64
	seq uint64
	i   int32 // node
}

func (a elem) before(b elem) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

// heap is a 4-ary min-heap ordered by (due, seq); each node knows its position.
type heap []elem

func (h heap) set(nodes []node, p int, e elem) {
	h[p] = e
	nodes[e.i].pos = int32(p)
}

func (h *heap) push(nodes []node, e elem) {
	*h = append(*h, e)
	h.up(nodes, len(*h)-1)
}

func (h *heap) removeAt(nodes []node, p int) {
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

func (h heap) up(nodes []node, p int) {
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

func (h heap) down(nodes []node, p int) {
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
