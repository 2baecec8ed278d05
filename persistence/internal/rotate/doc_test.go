package rotate_test

import (
	"fmt"

	"github.com/nornlabs/norn/persistence/internal/rotate"
)

func Example() {
	var c rotate.Cursors
	key := c.Key("jobs") // "": from the first subscriber
	c.Advance("jobs", key, []string{"a", "b"}, 2)
	fmt.Println(c.Key("jobs"))
	// The next two: c, then wrapping to a.
	c.Advance("jobs", c.Key("jobs"), []string{"a", "c"}, 2)
	fmt.Println(c.Key("jobs"))
	// Fewer than the bound: every subscriber was named.
	c.Advance("jobs", c.Key("jobs"), []string{"b"}, 2)
	fmt.Printf("%q\n", c.Key("jobs"))
	// Output:
	// b
	// a
	// ""
}
