package moqt

import "github.com/moqt-go/moqt/wire"

// writeObject writes a Normal object of w's subgroup with properties props
// (nil for none) and payload.
func writeObject(w *SubgroupWriter, id uint64, props, payload []byte) error {
	return w.WriteObject(Object{Location: wire.Location{Group: w.group, Object: id}, SubgroupID: w.subgroup,
		Properties: props, Payload: payload})
}

// writeStatus writes a status object of w's subgroup.
func writeStatus(w *SubgroupWriter, id uint64, status wire.ObjectStatus) error {
	return w.WriteObject(Object{Location: wire.Location{Group: w.group, Object: id}, SubgroupID: w.subgroup,
		Status: status})
}
