package chaosrun

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
)

// Workflow and activity names. The checks find instances and events by
// these strings in the store.
const (
	chainName    = "chaos-chain"
	consumerName = "chaos-consumer"
	txName       = "chaos-tx"
	countName    = "count"
	stepName     = "step"
	recordName   = "record"
	chainSteps   = 3
)

// chainWant is what chain workflow i returns: every step maps n to 10n+1.
func chainWant(i int) int { return i*1000 + 111 }

// IDs carry the run's prefix, so that runs sharing one database (an
// explicit SQLite file, a PostgreSQL database) never see each other.
func chainID(run string, i int) string    { return fmt.Sprintf("%s-chain-%06d", run, i) }
func consumerID(run string, j int) string { return fmt.Sprintf("%s-consumer-%02d", run, j) }
func txID(run string, i int) string       { return fmt.Sprintf("%s-tx-%06d", run, i) }
func chainPrefix(run string) string       { return run + "-chain-" }
func txPrefix(run string) string          { return run + "-tx-" }
func consumerPrefix(run string) string    { return run + "-consumer-" }
func channelName(run string) string       { return "chaos-" + run + "-jobs" }

// The tx workload's user table, in the store's database: counter rows the
// "count" transactional activity increments, txRows of them per run (so
// that concurrent workflows contend for rows), keyed "<run>-<row>".
const (
	txRows    = 16
	txTable   = `CREATE TABLE IF NOT EXISTS chaos_counter (k TEXT PRIMARY KEY, n BIGINT NOT NULL)`
	txInc     = `INSERT INTO chaos_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = chaos_counter.n + 1`
	txReadRow = `SELECT n FROM chaos_counter WHERE k = $1`
)

func txRow(run string, i int) string { return fmt.Sprintf("%s-%d", run, i%txRows) }

// txWant is what tx workflow i returns.
func txWant(i int) int { return i*10 + 1 }

// job is what the queue carries: published work, or (published once the
// queue is drained, one per consumer) the order to end.
type job struct {
	N    int  `json:"n,omitempty"`
	Stop bool `json:"stop,omitempty"`
}

// effectLog is the side-effect log every worker appends to: one line per
// activity execution, "<idempotency key> <attempt> <payload>", as an
// external system would see the calls. Each line is one write(2) on an
// O_APPEND file, so lines from concurrent processes do not interleave, and a
// kill -9 leaves either the whole line or nothing.
type effectLog struct{ f *os.File }

func openEffectLog(path string) (*effectLog, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open side-effect log: %w", err)
	}
	return &effectLog{f: f}, nil
}

func (l *effectLog) append(ctx context.Context, payload string) error {
	info, ok := actor.Info(ctx)
	if !ok {
		return fmt.Errorf("side-effect log: called outside an activity")
	}
	// Pretend to call something remote first, so that kills land while
	// activities are in flight, not only between them.
	if err := work(ctx, info.IdempotencyKey); err != nil {
		return err
	}
	line := info.IdempotencyKey + " " + strconv.Itoa(info.Attempt) + " " + payload + "\n"
	if _, err := l.f.WriteString(line); err != nil {
		return fmt.Errorf("side-effect log: %w", err)
	}
	return nil
}

// work takes 0.5–4 ms, the same for the same key.
func work(ctx context.Context, key string) error {
	h := fnv.New32a()
	h.Write([]byte(key))
	t := time.NewTimer(500*time.Microsecond + time.Duration(h.Sum32()%3500)*time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// workflows are the chaos workloads:
//
//   - chain: three "step" activities in sequence, each logging its call;
//   - consumer: subscribes to a competing channel and records every message
//     it receives there with a "record" activity (which logs the message ID
//     and returns it, so the history itself says which message each record
//     recorded), two messages at a time, until it receives a job with Stop
//     (then it records what it holds);
//   - tx: one "count" transactional activity incrementing a counter row.
func workflows(effects *effectLog, run string) (*actor.WorkflowDef[int, int], *actor.WorkflowDef[string, int], *actor.WorkflowDef[int, int]) {
	step := actor.Activity(stepName, func(ctx context.Context, n int) (int, error) {
		if err := effects.append(ctx, strconv.Itoa(n)); err != nil {
			return 0, err
		}
		return n*10 + 1, nil
	})
	chain := actor.Workflow(chainName, func(ctx *actor.Context, i int) (int, error) {
		n := i
		for range chainSteps {
			var err error
			if n, err = step.Run(ctx, n); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	record := actor.Activity(recordName, func(ctx context.Context, msgID string) (string, error) {
		return msgID, effects.append(ctx, msgID)
	})
	consumer := actor.Workflow(consumerName, func(ctx *actor.Context, channel string) (int, error) {
		if err := ctx.Subscribe(channel, mailbox.Competing); err != nil {
			return 0, err
		}
		// Messages are recorded two at a time: the first one's take waits
		// uncommitted (a park's deferred step) until the second comes, so
		// that kills also land on takes not yet committed.
		var held []string
		recordHeld := func() error {
			for _, id := range held {
				if _, err := record.Run(ctx, id); err != nil {
					return err
				}
			}
			held = held[:0]
			return nil
		}
		for n := 0; ; n++ {
			// On the channel alone, with no other filter: the receive a
			// node's fetcher serves (the stop comes on the channel too).
			m, err := actor.Receive[job](ctx, mailbox.OnChannel(channel))
			if err != nil {
				return n, err
			}
			if m.Value.Stop {
				return n, recordHeld()
			}
			if held = append(held, m.ID); len(held) == 2 {
				if err := recordHeld(); err != nil {
					return n, err
				}
			}
		}
	})
	// tx: one "count" transactional activity that increments its row of
	// the user's table, then logs its call (after the write, inside the
	// transaction, so that kills land between the write and its record).
	count := actor.TxActivity(countName, func(ctx context.Context, tx actor.Tx, i int) (int, error) {
		if _, err := tx.Exec(ctx, txInc, txRow(run, i)); err != nil {
			return 0, err
		}
		if err := effects.append(ctx, strconv.Itoa(i)); err != nil {
			return 0, err
		}
		return txWant(i), nil
	})
	txWf := actor.Workflow(txName, func(ctx *actor.Context, i int) (int, error) { return count.Run(ctx, i) })
	return chain, consumer, txWf
}
