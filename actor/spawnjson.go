package actor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// SpawnJSON starts an instance of def with its input given as JSON text,
// for tools that hold workflow definitions but not their Go types (the
// norn command's start). The text must decode into the workflow's input
// type, unknown object fields refused (a misspelt field would otherwise
// start the instance with a zero value); the decoded value is then
// encoded with the System's codec, as Spawn would. An empty id makes a
// fresh one; with an id, an existing instance of def is reported
// (Spawned.Existed) and nothing is started, as with SpawnID.
//
// A decoding error wraps ErrInvalidInput and the *json.SyntaxError or
// *json.UnmarshalTypeError, whose Offset says where the text is wrong.
func SpawnJSON(ctx context.Context, sys *System, def Definition, input []byte, id string) (Spawned, error) {
	if def == nil {
		return Spawned{}, fmt.Errorf("%w: nil workflow", ErrUnknownWorkflow)
	}
	if err := sys.checkRegistered(def); err != nil {
		return Spawned{}, err
	}
	v := reflect.New(def.inputType())
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return Spawned{}, fmt.Errorf("%w: input of %s: %w", ErrInvalidInput, def.Name(), err)
	}
	if dec.More() {
		return Spawned{}, fmt.Errorf("%w: input of %s: more than one JSON value", ErrInvalidInput, def.Name())
	}
	encoded, err := sys.encode(v.Elem().Interface())
	if err != nil {
		return Spawned{}, err
	}
	if err := sys.checkPayload("input", encoded); err != nil {
		return Spawned{}, err
	}
	if err := sys.enter(); err != nil {
		return Spawned{}, err
	}
	defer sys.leave()
	pid, existed, err := sys.create(ctx, def, encoded, id, "")
	if err != nil {
		return Spawned{}, err
	}
	return Spawned{PID: pid, Existed: existed}, nil
}
