// Command porcupine times Porcupine (github.com/anishathalye/porcupine) on history files,
// for bench/lin_vs_porcupine.py.
//
//	porcupine -format jsonl|etcd|kv [-timeout SECONDS] FILE...
//
// For each file it prints one JSON line: {"file", "ops", "seconds", "verdict"}, where
// seconds covers CheckOperationsTimeout only (parsing apart) and verdict is valid,
// invalid or unknown (timed out). Formats and models:
//
//   - jsonl: kchaos JSONL histories of a cas-register (read, write, cas [from, to];
//     null is nil). A fail did not happen; an info or a missing completion is an
//     operation of unknown outcome, returning at the end of the history.
//   - etcd: Porcupine's Jepsen etcd logs ("INFO  jepsen.util - 3 :invoke :read nil"),
//     checked as Porcupine's own tests check them: a failed cas is a cas whose compare
//     failed, :info and :timed-out are unknown outcomes returning at the end.
//   - kv: Porcupine's kv histories ({:process 0, :type :invoke, :f :get, :key "1",
//     :value nil}), a string per key with get, put and append, partitioned by key.
//
// Time is the position of the line (jsonl: the op's time).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

const nilValue = -1

type registerInput struct {
	f    string // read, write or cas
	a, b int    // write a; cas from a to b
}

type registerOutput struct {
	value   int  // the value read
	failed  bool // a cas whose compare failed (etcd)
	unknown bool
}

var registerModel = porcupine.Model{
	Init: func() interface{} { return nilValue },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		current, in, out := state.(int), input.(registerInput), output.(registerOutput)
		switch in.f {
		case "read":
			return out.unknown || out.value == current, current
		case "write":
			return true, in.a
		default:
			if out.unknown {
				if in.a == current {
					return true, in.b
				}
				return true, current
			}
			if out.failed {
				return in.a != current, current
			}
			if in.a == current {
				return true, in.b
			}
			return false, current
		}
	},
}

type kvInput struct {
	f, key, value string
}

type kvOutput struct {
	value   string
	unknown bool
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			key := op.Input.(kvInput).key
			if _, seen := byKey[key]; !seen {
				keys = append(keys, key)
			}
			byKey[key] = append(byKey[key], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, key := range keys {
			parts = append(parts, byKey[key])
		}
		return parts
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		current, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.f {
		case "get":
			return out.unknown || out.value == current, current
		case "put":
			return true, in.value
		default:
			return true, current + in.value
		}
	},
}

// history pairs invocations with completions by process.
type history struct {
	open      map[int]porcupine.Operation
	abandoned []porcupine.Operation
	ops       []porcupine.Operation
}

func newHistory() *history { return &history{open: map[int]porcupine.Operation{}} }

func (h *history) invoke(process int, input interface{}, at int64) {
	h.open[process] = porcupine.Operation{ClientId: process, Input: input, Call: at}
}

func (h *history) complete(process int, output interface{}, at int64) error {
	op, ok := h.open[process]
	if !ok {
		return fmt.Errorf("completion of process %d without an invocation", process)
	}
	delete(h.open, process)
	op.Output, op.Return = output, at
	h.ops = append(h.ops, op)
	return nil
}

// fail forgets the open operation of `process`: it did not happen.
func (h *history) fail(process int) { delete(h.open, process) }

// abandon leaves the open operation of `process` with an unknown outcome; the process may
// invoke again.
func (h *history) abandon(process int) {
	if op, ok := h.open[process]; ok {
		h.abandoned = append(h.abandoned, op)
		delete(h.open, process)
	}
}

// finish returns every operation; those of unknown outcome return after `end`.
func (h *history) finish(end int64, unknown interface{}) []porcupine.Operation {
	for process := range h.open {
		h.abandon(process)
	}
	for _, op := range h.abandoned {
		op.Output, op.Return = unknown, end+1
		h.ops = append(h.ops, op)
	}
	return h.ops
}

func lines(path string, each func(text string) error) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	number := 0
	for scanner.Scan() {
		number++
		text := strings.TrimSpace(scanner.Text())
		if text == "" {
			continue
		}
		if err := each(text); err != nil {
			return fmt.Errorf("%s:%d: %w", path, number, err)
		}
	}
	return scanner.Err()
}

type jsonOp struct {
	Time    int64           `json:"time"`
	Type    string          `json:"type"`
	Process json.RawMessage `json:"process"`
	F       string          `json:"f"`
	Value   interface{}     `json:"value"`
}

func readJSONL(path string) ([]porcupine.Operation, error) {
	h := newHistory()
	processes := map[string]int{}
	var end int64
	err := lines(path, func(text string) error {
		var op jsonOp
		if err := json.Unmarshal([]byte(text), &op); err != nil {
			return err
		}
		process, seen := processes[string(op.Process)]
		if !seen {
			process = len(processes)
			processes[string(op.Process)] = process
		}
		if op.Time > end {
			end = op.Time
		}
		switch op.Type {
		case "invoke":
			input, err := registerInputOf(op.F, op.Value)
			if err != nil {
				return err
			}
			h.invoke(process, input, op.Time)
		case "ok":
			output := registerOutput{value: nilValue}
			if op.F == "read" {
				output.value = registerValue(op.Value)
			}
			return h.complete(process, output, op.Time)
		case "fail":
			h.fail(process)
		case "info":
			h.abandon(process)
		default:
			return fmt.Errorf("unknown type %q", op.Type)
		}
		return nil
	})
	return h.finish(end, registerOutput{unknown: true}), err
}

func registerValue(value interface{}) int {
	if number, ok := value.(float64); ok {
		return int(number)
	}
	return nilValue
}

func registerInputOf(f string, value interface{}) (registerInput, error) {
	switch f {
	case "read":
		return registerInput{f: f}, nil
	case "write":
		return registerInput{f: f, a: registerValue(value)}, nil
	case "cas":
		pair, ok := value.([]interface{})
		if !ok || len(pair) != 2 {
			return registerInput{}, fmt.Errorf("cas needs [from, to], got %v", value)
		}
		return registerInput{f: f, a: registerValue(pair[0]), b: registerValue(pair[1])}, nil
	}
	return registerInput{}, fmt.Errorf("unknown f %q", f)
}

var etcdLine = regexp.MustCompile(
	`^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(nil|-?\d+|\[\s*-?\d+\s+-?\d+\s*\]|:timed-out)$`)

func readEtcd(path string) ([]porcupine.Operation, error) {
	h := newHistory()
	var at int64
	err := lines(path, func(text string) error {
		at++
		match := etcdLine.FindStringSubmatch(text)
		if match == nil {
			return fmt.Errorf("not an etcd log line: %q", text)
		}
		process, _ := strconv.Atoi(match[1])
		kind, f, raw := match[2], match[3], match[4]
		numbers := []int{nilValue, nilValue}
		for i, field := range strings.Fields(strings.Trim(raw, "[]")) {
			if value, err := strconv.Atoi(field); err == nil {
				numbers[i] = value
			}
		}
		switch {
		case kind == "invoke":
			h.invoke(process, registerInput{f: f, a: numbers[0], b: numbers[1]}, at)
		case kind == "info" || raw == ":timed-out":
			h.abandon(process)
		case kind == "ok":
			return h.complete(process, registerOutput{value: numbers[0]}, at)
		case kind == "fail":
			return h.complete(process, registerOutput{failed: true}, at)
		default:
			return fmt.Errorf("unknown type %q", kind)
		}
		return nil
	})
	return h.finish(at, registerOutput{unknown: true}), err
}

var kvField = regexp.MustCompile(`:(\w+)\s+("(?:[^"\\]|\\.)*"|:?[\w-]+)`)

func readKV(path string) ([]porcupine.Operation, error) {
	h := newHistory()
	var at int64
	err := lines(path, func(text string) error {
		at++
		fields := map[string]string{}
		for _, match := range kvField.FindAllStringSubmatch(text, -1) {
			fields[match[1]] = match[2]
		}
		process, err := strconv.Atoi(fields["process"])
		if err != nil {
			return fmt.Errorf("not a kv line: %q", text)
		}
		kind, f := strings.TrimPrefix(fields["type"], ":"), strings.TrimPrefix(fields["f"], ":")
		key, value := unquote(fields["key"]), unquote(fields["value"])
		switch kind {
		case "invoke":
			h.invoke(process, kvInput{f: f, key: key, value: value}, at)
		case "ok":
			return h.complete(process, kvOutput{value: value}, at)
		case "fail":
			h.fail(process)
		case "info":
			h.abandon(process)
		default:
			return fmt.Errorf("unknown type %q", kind)
		}
		return nil
	})
	return h.finish(at, kvOutput{unknown: true}), err
}

func unquote(raw string) string {
	if text, err := strconv.Unquote(raw); err == nil {
		return text
	}
	return ""
}

type result struct {
	File    string  `json:"file"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	Verdict string  `json:"verdict"`
	Error   string  `json:"error,omitempty"`
}

func main() {
	format := flag.String("format", "jsonl", "jsonl, etcd or kv")
	timeout := flag.Float64("timeout", 120, "seconds per file (0: none)")
	flag.Parse()
	readers := map[string]func(string) ([]porcupine.Operation, error){
		"jsonl": readJSONL, "etcd": readEtcd, "kv": readKV,
	}
	models := map[string]porcupine.Model{"jsonl": registerModel, "etcd": registerModel, "kv": kvModel}
	read, known := readers[*format]
	if !known {
		fmt.Fprintf(os.Stderr, "porcupine: unknown format %q\n", *format)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	failed := false
	for _, path := range flag.Args() {
		ops, err := read(path)
		if err != nil {
			failed = true
			_ = out.Encode(result{File: path, Verdict: "error", Error: err.Error()})
			continue
		}
		started := time.Now()
		verdict := porcupine.CheckOperationsTimeout(models[*format], ops,
			time.Duration(*timeout*float64(time.Second)))
		seconds := time.Since(started).Seconds()
		name := map[porcupine.CheckResult]string{
			porcupine.Ok: "valid", porcupine.Illegal: "invalid", porcupine.Unknown: "unknown",
		}[verdict]
		_ = out.Encode(result{File: path, Ops: len(ops), Seconds: seconds, Verdict: name})
	}
	if failed {
		os.Exit(1)
	}
}
