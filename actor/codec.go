package actor

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// encode turns a value into its stored form: JSON, except that []byte is
// kept as raw bytes.
func encode(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return append([]byte(nil), b...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", ErrInvalidInput, v, err)
	}
	return b, nil
}

// decode is encode's inverse.
func decode[T any](data []byte) (T, error) {
	var v T
	if p, ok := any(&v).(*[]byte); ok {
		*p = append([]byte(nil), data...)
		return v, nil
	}
	if len(data) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, err
	}
	return v, nil
}

func typeName[T any]() string {
	return reflect.TypeFor[T]().String()
}
