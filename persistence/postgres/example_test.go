package postgres_test

import (
	"context"
	"errors"
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

// The runtime finds wake-ups through Listen (persistence.Notifier), which
// a store that cannot notify refuses with persistence.ErrUnsupported.
func ExampleStore_Listen() {
	var st persistence.Store // from postgres.Open
	go func() {
		err := st.Listen(context.Background(), func(ids []string) { /* wake activations */ })
		if errors.Is(err, persistence.ErrUnsupported) {
			return // poll instead
		}
	}()
}
