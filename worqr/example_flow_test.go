package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A flow of three stages; the middle one fans out to two child queues, and the
// last one sees how the children ended.
func ExampleFlow() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-flow"}

	send := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		t.SetResult([]byte(t.Queue + " sent to " + string(t.Payload)))
		return nil
	})
	stage := func(f func(r *worqr.Run) *worqr.StageResult) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			return f(r), nil
		})
	}
	flow := &worqr.Flow{Name: "welcome", IndexBy: []string{"user"}, Stages: []worqr.Stage{
		{Name: "check", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"allowed": "yes"}}
		})},
		{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 2},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 2, Handler: send}, "sms": {Concurrency: 2, Handler: send}},
			Handler: stage(func(r *worqr.Run) *worqr.StageResult {
				u := []byte(r.State["user"])
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "mail", Payload: u}, {Queue: "sms", Payload: u}}}
			})},
		{Name: "record", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"children": fmt.Sprint(len(r.Children))}}
		})},
	}}

	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	id, err := client.StartRun(ctx, flow, map[string]string{"user": "ada"}, nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(wctx, flow, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, run.State["allowed"], run.State["children"])
	for _, c := range run.Children {
		fmt.Printf("%s %s %q\n", c.Queue, c.Status, c.Result)
	}
	runs, _ := in.FindRuns(ctx, flow, "user", "ada")
	fmt.Println(len(runs), "run for user ada")
	// Unordered output:
	// done yes 2
	// mail done "mail sent to ada"
	// sms done "sms sent to ada"
	// 1 run for user ada
}

// An order waits for its payment's webhook (a signal), at most two days,
// then ships; an onboarding run sleeps between its stages. Both wait in
// Redis: no worker holds them meanwhile.
func ExampleClient_Signal() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-signal"}

	stage := func(f func(r *worqr.Run) *worqr.StageResult) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			return f(r), nil
		})
	}
	order := &worqr.Flow{Name: "order", Stages: []worqr.Stage{
		{Name: "charge", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			// Ask the payment provider, then wait for its webhook.
			return &worqr.StageResult{Await: "paid", Sleep: 48 * time.Hour}
		})},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			if _, paid := r.State["paid"]; !paid {
				return &worqr.StageResult{Fields: map[string]string{"outcome": "payment timed out"}}
			}
			return &worqr.StageResult{Fields: map[string]string{"outcome": "shipped for " + r.State["paid"]}}
		})},
	}}
	onboarding := &worqr.Flow{Name: "onboarding", Stages: []worqr.Stage{
		{Name: "welcome", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Sleep: 100 * time.Millisecond} // three days, in production
		})},
		{Name: "check", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"checked": "yes"}}
		})},
	}}

	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{order, onboarding}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	orderID, err := client.StartRun(ctx, order, nil, nil)
	if err != nil {
		panic(err)
	}
	onboardingID, err := client.StartRun(ctx, onboarding, nil, nil)
	if err != nil {
		panic(err)
	}
	// The webhook: sent before or after the run waits for it, it is taken
	// once; the provider's delivery id makes a repeat safe.
	if _, err := client.Signal(ctx, order, orderID, "paid", []byte("12 EUR"), "evt_1"); err != nil {
		panic(err)
	}
	if _, err := client.Signal(ctx, order, orderID, "paid", []byte("12 EUR"), "evt_1"); errors.Is(err, worqr.ErrDuplicate) {
		fmt.Println("evt_1 taken once")
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(wctx, order, orderID)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, run.State["outcome"])
	run, err = client.WaitRun(wctx, onboarding, onboardingID)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, run.State["checked"])
	// Output:
	// evt_1 taken once
	// done shipped for 12 EUR
	// done yes
}

// A join: a quote fetches its price and its stock in parallel branches,
// and its "quote" stage runs once, when both are done, with their fields
// in the state.
func ExampleStage_branches() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-join"}

	branch := func(field, value string) worqr.Branch {
		return worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 2}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				// look up r.State["sku"] somewhere slow
				return &worqr.StageResult{Fields: map[string]string{field: value}}, nil
			})}
	}
	flow := &worqr.Flow{Name: "quotes", Stages: []worqr.Stage{
		{Name: "quote", Queue: worqr.QueueConfig{Concurrency: 2},
			Branches: map[string]worqr.Branch{"price": branch("price", "12.50"), "stock": branch("stock", "7")},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				for _, c := range r.Children {
					fmt.Println("branch", c.Queue, c.Status)
				}
				quote := fmt.Sprintf("%s x%s at %s", r.State["sku"], r.State["stock"], r.State["price"])
				return &worqr.StageResult{Fields: map[string]string{"quote": quote}}, nil
			})},
	}}

	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	id, err := client.StartRun(ctx, flow, map[string]string{"sku": "A-1"}, nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err := client.WaitRun(wctx, flow, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, run.State["quote"])
	// Unordered output:
	// branch price done
	// branch stock done
	// done A-1 x7 at 12.50
}
