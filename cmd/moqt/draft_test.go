package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

func TestParseDrafts(t *testing.T) {
	vs, err := parseDrafts("21, moqt-20")
	require.NoError(t, err)
	assert.Equal(t, []wire.Version{wire.Draft21, wire.Draft20}, vs)
	for _, bad := range []string{"", "17", "22", "x", "21,21", "-1"} {
		_, err := parseDrafts(bad)
		assert.Error(t, err, "%q", bad)
	}
	var d draftFlag
	require.NoError(t, d.Set("20"))
	assert.Equal(t, "20", d.String())
	assert.Equal(t, []wire.Version{wire.Draft20}, d.versions)
}
