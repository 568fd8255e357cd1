package wire

// A TrackKey identifies a track by its Full Track Name as a comparable
// value, for use as a map key: two names have equal keys exactly when
// Equal reports true. Obtain one with FullTrackName.Key.
type TrackKey struct{ s string }

// A NamespaceKey identifies a Track Namespace as a comparable value, for
// use as a map key: two namespaces have equal keys exactly when Equal
// reports true. Obtain one with Namespace.Key.
type NamespaceKey struct{ s string }

// Key returns ns's map key. It is the fields' length-prefixed encoding,
// so that ("a", "bc") and ("ab", "c") have different keys; a namespace
// that need not be valid (§8.7) still has one.
func (ns Namespace) Key() NamespaceKey {
	var buf [128]byte
	return NamespaceKey{string(ns.appendKey(buf[:0]))}
}

// Key returns t's map key: the length-prefixed encoding of each
// namespace field and then of the name, so that no two different names
// share one, however their bytes split between fields and name.
func (t FullTrackName) Key() TrackKey {
	var buf [128]byte
	return TrackKey{string(appendLenBytes(t.Namespace.appendKey(buf[:0]), t.Name))}
}

// appendKey appends each field with its length. Without a field count in
// front, the key of a namespace is a prefix of the keys of the longer
// namespaces it is a field-wise prefix of, and of no other.
func (ns Namespace) appendKey(b []byte) []byte {
	for _, f := range ns {
		b = appendLenBytes(b, f)
	}
	return b
}
