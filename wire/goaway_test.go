package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGoawayURIOver8192(t *testing.T) {
	long := strings.Repeat("u", MaxURILen+1)
	_, err := ParseMessage(Draft21, MsgGoaway, rawBody(len(long), long, 0))
	assertCloses(t, err, ProtocolViolation)
	assert.NotErrorIs(t, err, ErrTruncated)
	_, err = AppendMessage(Draft21, nil, &Goaway{NewSessionURI: long})
	assertCloses(t, err, ProtocolViolation)

	max := strings.Repeat("u", MaxURILen)
	m, err := ParseMessage(Draft21, MsgGoaway, rawBody(len(max), max, 30000))
	require.NoError(t, err)
	assert.Equal(t, &Goaway{NewSessionURI: max, Timeout: 30000}, m)
}

func TestGoawayCheck(t *testing.T) {
	withURI := &Goaway{NewSessionURI: "moqt://b.example"}
	assertCloses(t, withURI.Check(true), ProtocolViolation)
	assert.NoError(t, withURI.Check(false), "a server may send a URI")
	assert.NoError(t, (&Goaway{Timeout: 1}).Check(true), "a client sends an empty URI")
}
