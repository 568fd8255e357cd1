package wire

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLocationString: IDs print in decimal, and a field at MaxVarint, the
// open end of a filter or range, prints as max, never as its 20 digits.
func TestLocationString(t *testing.T) {
	for _, tc := range []struct {
		loc  Location
		want string
	}{
		{Location{}, "{0, 0}"},
		{Location{Group: 5, Object: 2}, "{5, 2}"},
		{Location{Group: 5, Object: MaxVarint}, "{5, max}"},
		{Location{Group: MaxVarint, Object: MaxVarint}, "{max, max}"},
		{Location{Group: MaxVarint - 1, Object: 0}, "{18446744073709551614, 0}"},
	} {
		assert.Equal(t, tc.want, tc.loc.String())
		assert.Equal(t, tc.want, fmt.Sprintf("%v", tc.loc), "%%v uses String")
	}
	// Inside a struct too, as a filter's window prints.
	window := struct{ Start, End Location }{Location{1, 0}, Location{1, MaxVarint}}
	assert.Equal(t, "{{1, 0} {1, max}}", fmt.Sprint(window))
}
