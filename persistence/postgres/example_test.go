package postgres_test

import (
	"context"
	"log"
	"os"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

func ExampleOpen() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, os.Getenv("NORN_POSTGRES_URL"), postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// Hear about instances that other nodes woke.
	go st.Listen(ctx, func(ids []string) {
		if ids == nil {
			log.Print("rescan: wake-ups may have been missed")
			return
		}
		log.Printf("woken elsewhere: %v", ids)
	})

	// One step, applied atomically (and shared with concurrent steps in one
	// commit).
	res, err := st.Apply(ctx, persistence.Step{Send: []persistence.NewMessage{
		{ID: "msg-1", Channel: "payments", Payload: []byte(`{"order":42}`)},
	}})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("woke %v", res.Woken)
}

// The runtime finds wake-ups through the Notifier interface.
func ExampleStore_Listen() {
	var st persistence.Store // from postgres.Open
	if n, ok := st.(postgres.Notifier); ok {
		go n.Listen(context.Background(), func(ids []string) { /* wake activations */ })
	}
}
