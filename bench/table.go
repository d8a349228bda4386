package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// rowDef is one row of the table: key names the value a scenario reports.
type rowDef struct {
	key, label, unit, scenario string
}

// rowDefs is every row, in table order.
var rowDefs = []rowDef{
	{"intake_accepted", "intake: client publishes until the stream accepts", "tasks/s", "intake"},
	{"intake_stored", "intake: until every record is stored (native: accepted = stored)", "tasks/s", "intake"},
	{"spread_p50", "spread lateness p50 vs Ax-Due-At (native: its @at)", "ms", "spread"},
	{"spread_p99", "spread lateness p99 vs Ax-Due-At", "ms", "spread"},
	{"spread_max", "spread lateness max vs Ax-Due-At", "ms", "spread"},
	{"spread_client_p50", "spread lateness p50 vs the client's clock", "ms", "spread"},
	{"spread_client_p99", "spread lateness p99 vs the client's clock", "ms", "spread"},
	{"spread_client_max", "spread lateness max vs the client's clock", "ms", "spread"},
	{"spread_conflicts", "spread: claim conflicts, all bridges (CAS lost to another replica)", "claims", "spread"},
	{"burst_fired", "burst: due → last fire received", "s", "burst"},
	{"burst_fire_rate", "burst: fires/s", "fires/s", "burst"},
	{"burst_acked", "burst: due → every ack applied", "s", "burst"},
	{"burst_ack_rate", "burst: acks applied/s", "acks/s", "burst"},
	{"burst_conflicts", "burst: claim conflicts, all bridges (CAS lost to another replica)", "claims", "burst"},
	{"writes", "writes per successful task: JetStream messages stored, all streams", "writes", "burst"},
	{"writes_removals", "removals per successful task: work-queue acks, superseded KV revisions, purged schedules", "writes", "burst"},
	{"iso_alone_p99", "isolation: orders (200/s) p99 lateness vs Ax-Due-At, alone", "ms", "isolation"},
	{"iso_burst_p99", "isolation: orders p99 lateness during a --burst of reports due at one instant", "ms", "isolation"},
	{"iso_burst_max", "isolation: orders max lateness during that burst", "ms", "isolation"},
	{"iso_burst_fired", "isolation: reports due → last fire received", "s", "isolation"},
	{"series_ticks", "series: ticks of a 1s series fired, each once (native: @every 1s; bridge: Ax-Every 1s)", "ticks", "series"},
	{"series_p50", "series: lateness p50 per tick (native: vs the Nats-Schedule-Next before it; bridge: vs Ax-Due-At)", "ms", "series"},
	{"series_p99", "series: lateness p99 per tick", "ms", "series"},
	{"series_max", "series: lateness max per tick", "ms", "series"},
	{"limit_peak", "limits: most fires the consumer held at once, max_in_flight 100 (native: no such bound)", "fires", "limits"},
	{"limit_drain", "limits: --limit-tasks due at once, each held 20 ms → last fire", "s", "limits"},
	{"bulk_dry", "bulk: dry run of a requeue of --bulk-tasks DEAD tasks (count and sample)", "ms", "bulk"},
	{"bulk_requeue", "bulk: requeue job start → every one of them fired again, once", "s", "bulk"},
	{"bulk_rate", "bulk: tasks requeued and fired again per second (job at --bulk-rate)", "tasks/s", "bulk"},
	{"pending_intake", "pending: intake of M far-future tasks until stored", "tasks/s", "pending"},
	{"heap_steady", "bridge heap per pending task, steady (HeapAlloc after GC)", "B", "pending"},
	{"heap_restart", "bridge heap per pending task after a restart", "B", "pending"},
	{"server_rss", "server RSS per pending task (all nodes)", "B", "pending"},
	{"restart_fire", "restart at M pending → first fire of a new task", "s", "pending"},
	{"restart_ready", "restart at M pending → ready (native: healthy; bridge: index loaded)", "s", "pending"},
	{"census_list", "operator API at M pending: first list page of 100, slowest of 5 (native: no list)", "ms", "pending"},
	{"census_list_one", "operator API at M pending: a list that selects 1 task, slowest of 5", "ms", "pending"},
	{"census_stats", "operator API at M pending: stats, slowest of 5", "ms", "pending"},
	{"binary_rss", "axbridge binary: RSS per pending task, M through intake, steady (no restart)", "B", "binary"},
	{"binary_heap", "axbridge binary: heap in use per pending task (go_memstats_heap_inuse_bytes)", "B", "binary"},
	{"binary_spread_p50", "axbridge binary: spread lateness p50 vs Ax-Due-At with M pending", "ms", "binary"},
	{"binary_spread_p99", "axbridge binary: spread lateness p99 with M pending", "ms", "binary"},
	{"binary_spread_max", "axbridge binary: spread lateness max with M pending", "ms", "binary"},
	{"binary_rss_after", "axbridge binary: RSS per pending task after that spread", "B", "binary"},
}

// result is what one scenario side measured.
type result struct {
	vals  map[string]float64
	lost  int // tasks scheduled that never fired (or were never stored), where checked
	early int // fires received before their due time
	err   error
	notes []string
}

// Row is one table row as --json prints it. Values are absent where a side has no figure.
type Row struct {
	Metric      string   `json:"metric"`
	Key         string   `json:"key"`
	Unit        string   `json:"unit"`
	Native      *float64 `json:"native,omitempty"`
	Bridge      *float64 `json:"bridge,omitempty"`
	Ratio       *float64 `json:"ratio,omitempty"` // bridge / native
	NativeLost  int      `json:"native_lost"`
	NativeEarly int      `json:"native_early"`
	BridgeLost  int      `json:"bridge_lost"`
	BridgeEarly int      `json:"bridge_early"`
}

// Report is the whole run as --json prints it.
type Report struct {
	Settings map[string]any `json:"settings"`
	Rows     []Row          `json:"rows"`
	Errors   []string       `json:"errors,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	// OK: every scenario ran, with 0 lost and 0 early on both sides.
	OK bool `json:"ok"`
}

// buildReport turns the scenario results (by scenario, then "native"/"bridge") into rows.
func buildReport(settings map[string]any, order []string, res map[string]map[string]*result) Report {
	r := Report{Settings: settings, OK: true}
	for _, sc := range order {
		for _, side := range []string{"native", "bridge"} {
			x := res[sc][side]
			if x == nil {
				continue
			}
			if x.err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("%s/%s: %v", sc, side, x.err))
				r.OK = false
			}
			if x.lost > 0 || x.early > 0 {
				r.OK = false
			}
			for _, n := range x.notes {
				r.Notes = append(r.Notes, fmt.Sprintf("%s/%s: %s", sc, side, n))
			}
		}
	}
	for _, d := range rowDefs {
		sides := res[d.scenario]
		if sides == nil {
			continue
		}
		row := Row{Metric: d.label, Key: d.key, Unit: d.unit}
		if n := sides["native"]; n != nil {
			row.NativeLost, row.NativeEarly = n.lost, n.early
			if v, ok := n.vals[d.key]; ok {
				row.Native = &v
			}
		}
		if b := sides["bridge"]; b != nil {
			row.BridgeLost, row.BridgeEarly = b.lost, b.early
			if v, ok := b.vals[d.key]; ok {
				row.Bridge = &v
			}
		}
		if row.Native != nil && row.Bridge != nil && *row.Native != 0 {
			q := *row.Bridge / *row.Native
			row.Ratio = &q
		}
		r.Rows = append(r.Rows, row)
	}
	return r
}

func (r Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints the report as a Markdown table, with the settings above it.
func (r Report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", settingsLine(r.Settings))
	fmt.Fprintln(w, "| metric | unit | native | bridge | bridge/native | lost/early native | lost/early bridge |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d/%d | %d/%d |\n", row.Metric, row.Unit,
			formatValue(row.Native, row.Unit), formatValue(row.Bridge, row.Unit), formatRatio(row.Ratio),
			row.NativeLost, row.NativeEarly, row.BridgeLost, row.BridgeEarly)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "ERROR: %s\n", e)
	}
	if r.OK {
		fmt.Fprintln(w, "0 lost and 0 early in every row, on both sides.")
	} else {
		fmt.Fprintln(w, "NOT OK: see the lost/early columns and errors above.")
	}
}

func settingsLine(s map[string]any) string {
	keys := []string{"sync", "nodes", "bridges", "write_batch", "burst", "spread", "intake", "pending", "payload_bytes", "nats_server", "go", "cpus", "date"}
	var parts []string
	for _, k := range keys {
		if v, ok := s[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return "axbridge bench: " + strings.Join(parts, " ")
}

func formatValue(v *float64, unit string) string {
	if v == nil {
		return "–"
	}
	switch unit {
	case "ms":
		return fmt.Sprintf("%.1f", *v)
	case "s":
		return fmt.Sprintf("%.2f", *v)
	case "writes":
		return fmt.Sprintf("%.2f", *v)
	default:
		return thousands(*v)
	}
}

func formatRatio(q *float64) string {
	if q == nil {
		return "–"
	}
	if math.Abs(*q) < 0.1 {
		return fmt.Sprintf("%.3f×", *q)
	}
	return fmt.Sprintf("%.2f×", *q)
}

// thousands formats v rounded to an integer with comma separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
