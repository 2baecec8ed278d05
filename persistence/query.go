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
