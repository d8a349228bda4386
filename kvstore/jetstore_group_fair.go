package kvstore

// fairQueue holds the grouper's writes not yet sent, one FIFO per class (a record's bizType),
// and hands them out round-robin across the classes that have writes waiting: one bizType's
// burst of claims and acks does not queue another bizType's writes behind all of it (issue 25,
// isolation). A key's writes are of one class, so they keep their order; writes of different
// keys never depended on theirs (each is a CAS on its own key's revision).
type fairQueue struct {
	byClass map[string]*classQueue
	ring    []*classQueue // the classes with writes, in turn
	next    int           // ring position of the class to take from next
	n       int
}

type classQueue struct {
	class string
	ops   []groupOp
}

func newFairQueue() *fairQueue { return &fairQueue{byClass: map[string]*classQueue{}} }

func (q *fairQueue) len() int { return q.n }

// push appends o to its class's FIFO.
func (q *fairQueue) push(o groupOp) {
	c := q.byClass[o.op.class]
	if c == nil {
		c = &classQueue{class: o.op.class}
		q.byClass[o.op.class] = c
	}
	if len(c.ops) == 0 {
		q.ring = append(q.ring, c)
	}
	c.ops = append(c.ops, o)
	q.n++
}

// pop takes the next write: the oldest of the class whose turn it is.
func (q *fairQueue) pop() groupOp {
	q.next %= len(q.ring)
	c := q.ring[q.next]
	o := c.ops[0]
	c.ops[0] = groupOp{}
	c.ops = c.ops[1:]
	q.n--
	if len(c.ops) == 0 {
		c.ops = nil
		q.ring = append(q.ring[:q.next], q.ring[q.next+1:]...)
		delete(q.byClass, c.class)
	} else {
		q.next++
	}
	return o
}

// cut takes the next batch: up to max writes to distinct keys, round-robin across the classes.
// A class whose next write is to a key already in the batch gives no more to this batch, so that
// its writes keep their order.
func (q *fairQueue) cut(max int) []groupOp {
	batch := make([]groupOp, 0, min(q.n, max))
	keys := make(map[string]bool, cap(batch))
	var held []*classQueue // classes stopped for this batch, with their writes
	for q.n > 0 && len(batch) < max {
		q.next %= len(q.ring)
		c := q.ring[q.next]
		if keys[c.ops[0].msg.Subject] {
			held = append(held, c)
			q.ring = append(q.ring[:q.next], q.ring[q.next+1:]...)
			q.n -= len(c.ops)
			if len(q.ring) == 0 {
				break
			}
			continue
		}
		o := q.pop()
		keys[o.msg.Subject] = true
		batch = append(batch, o)
	}
	for _, c := range held {
		q.ring = append(q.ring, c)
		q.n += len(c.ops)
	}
	return batch
}
