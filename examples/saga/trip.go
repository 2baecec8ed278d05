package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/supervisor"
)

// Trip is the workflow's input.
type Trip struct {
	ID       string // instance ID: trip-rome, trip-oslo
	From, To string // airports
	City     string
	Nights   int
	// PayWithin, if set, makes the trip wait that long for a
	// PaymentConfirmed message once everything is booked.
	PayWithin time.Duration
}

// Itinerary is the workflow's result: one confirmation code per booking.
type Itinerary struct {
	Flight, Hotel, Car string
}

// PaymentConfirmed is the message a payment service would send the trip.
type PaymentConfirmed struct{ Amount int }

// Each booking is an activity with a compensation: once the booking has
// succeeded, Norn remembers it, and if the trip later fails or is cancelled
// it calls the compensation with the same input and the booking's result
// (its confirmation code), newest booking first. Compensations use the
// activity's retry policy.
var bookFlight = actor.Activity("book-flight", func(ctx context.Context, t Trip) (string, error) {
	code := "FL-" + t.From + "-" + t.To
	step(t, "book flight   %s→%s: %s", t.From, t.To, code)
	return code, nil
}, actor.WithRetry(supervisor.NoRetry()),
	actor.WithCompensation(func(ctx context.Context, t Trip, code string) error {
		step(t, "cancel flight %s", code)
		return nil
	}))

var bookHotel = actor.Activity("book-hotel", func(ctx context.Context, t Trip) (string, error) {
	code := fmt.Sprintf("HT-%s-%dN", t.City, t.Nights)
	step(t, "book hotel    %s, %d nights: %s", t.City, t.Nights, code)
	return code, nil
}, actor.WithRetry(supervisor.NoRetry()),
	actor.WithCompensation(func(ctx context.Context, t Trip, code string) error {
		step(t, "cancel hotel  %s", code)
		return nil
	}))

// bookCar has a retry policy (3 attempts, 50 ms apart and doubling), but an
// error wrapped in supervisor.Terminal is never retried: no number of
// attempts will put a car in an empty lot.
var bookCar = actor.Activity("book-car", func(ctx context.Context, t Trip) (string, error) {
	if t.To == "FCO" {
		info, _ := actor.Info(ctx)
		step(t, "book car      at %s: no cars left (attempt %d, terminal: not retried)", t.To, info.Attempt)
		return "", supervisor.Terminal(errors.New("no cars left at " + t.To))
	}
	code := "CR-" + t.To
	step(t, "book car      at %s: %s", t.To, code)
	return code, nil
}, actor.WithRetry(supervisor.Exponential(50*time.Millisecond, 2, time.Second, 3)),
	actor.WithCompensation(func(ctx context.Context, t Trip, code string) error {
		step(t, "cancel car    %s", code)
		return nil
	}))

// tripFlow is the saga: plain Go that books three things in turn. It does
// nothing special on failure: returning an error (or being cancelled) is
// what makes Norn run the compensations of the bookings that succeeded.
var tripFlow = actor.Workflow("trip", func(ctx *actor.Context, t Trip) (Itinerary, error) {
	var it Itinerary
	var err error
	if it.Flight, err = bookFlight.Run(ctx, t); err != nil {
		return Itinerary{}, err
	}
	if it.Hotel, err = bookHotel.Run(ctx, t); err != nil {
		return Itinerary{}, err
	}
	if it.Car, err = bookCar.Run(ctx, t); err != nil {
		return Itinerary{}, err
	}
	if t.PayWithin > 0 {
		// Workflow code runs again on replay; print only when live.
		if !ctx.Replaying() {
			step(t, "wait for PaymentConfirmed (actor.Receive, deadline %v)", t.PayWithin)
		}
		// A durable wait. sys.Cancel makes it return actor.ErrCancelled;
		// returning that error runs the compensations and ends the trip
		// cancelled. Missing the deadline (actor.ErrTimeout) would end it
		// failed, after the same compensations.
		if _, err := actor.Receive[PaymentConfirmed](ctx, mailbox.Timeout(t.PayWithin)); err != nil {
			return Itinerary{}, err
		}
	}
	return it, nil
})

func step(t Trip, format string, args ...any) {
	fmt.Printf("  %-9s  "+format+"\n", append([]any{t.ID}, args...)...)
}
