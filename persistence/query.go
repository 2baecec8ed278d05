package persistence

import (
	"fmt"
	"sort"
	"strings"
)

// MaxInputConditions bounds InstanceQuery.Input: each condition is checked
// on every row the indexed filters select.
const MaxInputConditions = 16

// InputCondition is one InstanceQuery.Input entry, its key split into the
// path of object fields it names.
type InputCondition struct {
	Path  []string
	Value string
}

// Validate checks the query's fields; ListInstances calls it first and fails
// with its *InvalidError.
func (q *InstanceQuery) Validate() error {
	var v validator
	v.id("Workflow", -1, "", q.Workflow)
	v.id("Parent", -1, "", q.Parent)
	for i, st := range q.Statuses {
		if !st.Valid() {
			v.fail("Statuses", i, "", "unknown status "+excerpt(string(st)))
		}
	}
	if q.After != nil {
		v.required("After", -1, ".ID", q.After.ID)
	}
	if len(q.Input) > MaxInputConditions {
		v.fail("Input", -1, "", fmt.Sprintf("%d conditions, at most %d allowed", len(q.Input), MaxInputConditions))
	}
	for k, val := range q.Input {
		field := "Input[" + excerpt(k) + "]"
		v.text(field, -1, "", k, MaxNameLen)
		v.text(field, -1, "", val, MaxMetadataValueLen)
		for _, seg := range strings.Split(k, ".") {
			if seg == "" {
				v.fail(field, -1, "", "a key is field names separated by dots, none of them empty")
				break
			}
		}
	}
	return v.err
}

// InputConditions is q.Input as paths, ordered by key, so that drivers
// build the same statement for the same query.
func (q *InstanceQuery) InputConditions() []InputCondition {
	keys := make([]string, 0, len(q.Input))
	for k := range q.Input {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]InputCondition, len(keys))
	for i, k := range keys {
		out[i] = InputCondition{Path: strings.Split(k, "."), Value: q.Input[k]}
	}
	return out
}

// PageLimit is q.Limit with its default and maximum applied.
func (q *InstanceQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultQueryLimit
	case q.Limit > MaxQueryLimit:
		return MaxQueryLimit
	}
	return q.Limit
}

// ParseInputFilter reads input conditions as people type them, in the
// viewer's filter box and the norn command's --input: "field=value" pairs
// separated by commas ("customer=ann, address.city=Oslo"), a dotted field
// naming a nested one. Spaces around fields and values are dropped; a value
// cannot hold a comma. It adds the pairs to into (allocating it if nil) and
// returns it; a part that is not field=value is an *InvalidError naming it.
func ParseInputFilter(into map[string]string, s string) (map[string]string, error) {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return into, &InvalidError{Field: "Input", Reason: excerpt(part) + " is not field=value"}
		}
		if into == nil {
			into = map[string]string{}
		}
		into[k] = strings.TrimSpace(v)
	}
	return into, nil
}
