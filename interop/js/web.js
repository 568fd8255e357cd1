// The web page of `moqt relay -web` and `moqt demo -web` (cmd/moqt/web.go):
// it watches a track through the relay, showing its objects as they come,
// and publishes what a person types, one object a line. It speaks MoQT
// through @moq/net's public API, the library and version the interop test
// runs (interop/package.json).
//
// `npm run build:web` (js/build-web.js) bundles this file and @moq/net into
// cmd/moqt/web/moqt-web.js, committed and embedded in the moqt binary, so
// that the page works without npm; cmd/moqt's TestWebBundle fails when the
// committed bundle is not what the script builds from these sources.
//
// The page opens two WebTransport sessions to the relay. One publishes the
// page's broadcast (PUBLISH_NAMESPACE); the other discovers namespaces
// (SUBSCRIBE_NAMESPACE with the empty prefix) and subscribes. A relay never
// tells a session of its own namespaces, so with a single session the page
// could not learn when the relay knows its broadcast; with two, the
// watching side waits for the page's NAMESPACE as it waits for anyone's.
//
// What @moq/net 0.3.4 cannot do (README.md, Interop): it misreads the
// LARGEST_OBJECT parameter, which a SUBSCRIBE_OK carries once a track has
// objects (draft-21 §9.20.18), so it can only join a track before its first
// object; and as a publisher it sends that parameter misencoded, which makes
// the relay close its session. So the page serves each of the relay's
// SUBSCRIBEs with a fresh, empty track (see Publisher) and, when a join
// fails that way, says so (explain).
import * as Moq from "@moq/net";

const CONNECT_TIMEOUT_MS = 10_000;
// The objects shown, newest last; older ones are dropped.
const MAX_SHOWN = 500;
const PUBLISHED_TRACK = "chat";

const $ = (id) => document.getElementById(id);
const utf8 = new TextDecoder("utf-8", { fatal: true });

function describe(err) {
	if (err === undefined || err === null) return "";
	if (err instanceof Error) return err.message || err.name;
	return String(err);
}

// setState shows a status line and records its state for tests and styles.
function setState(el, state, text) {
	el.dataset.state = state;
	el.textContent = text;
}

// misread matches how @moq/net 0.3.4 fails on a SUBSCRIBE_OK with
// LARGEST_OBJECT: it takes the Location's Group ID for a length, so it
// finds no bytes after a small one and too many asked for after a large one.
const misread = /buffer is empty|exceeds max size|trailing bytes in message parameter Location/;

// explain turns how a subscription ended into what a person can act on.
function explain(err) {
	const msg = describe(err);
	if (misread.test(msg)) {
		return (
			`@moq/net could not read the relay's answer to its SUBSCRIBE (${msg}). The track already has ` +
			"objects, so the answer says where it stands (LARGEST_OBJECT, draft-21 §9.20.18), a parameter " +
			"@moq/net 0.3.4 misreads: in a browser it can only join a track before its first object. " +
			"moqt sub, in a terminal, can join it."
		);
	}
	if (/code=16\b/.test(msg)) return `The relay has no such track (${msg}).`;
	return `The subscription ended: ${msg}`;
}

// text shows a payload as text, or says what it is when it is not UTF-8.
function text(payload) {
	try {
		return utf8.decode(payload);
	} catch {
		return `(${payload.length} bytes, not UTF-8)`;
	}
}

function connect(cfg) {
	const webtransport = {};
	if (cfg.certHash) {
		// A self-signed certificate, trusted by its SHA-256 as the relay
		// printed it; a certificate from an authority needs nothing.
		webtransport.serverCertificateHashes = [{ algorithm: "sha-256", value: cfg.certHash }];
	}
	return Moq.Connection.connect(new URL(cfg.url), {
		webtransport,
		// The relay speaks WebTransport and raw QUIC, not WebSocket.
		websocket: { enabled: false },
		discovery: true,
		signal: AbortSignal.timeout(CONNECT_TIMEOUT_MS),
	});
}

// Discovery follows the namespaces the relay announces to the watching
// session: one SUBSCRIBE_NAMESPACE for all of them, since a session may not
// hold two whose prefixes overlap (§9.15, PREFIX_OVERLAP).
class Discovery {
	constructor(conn) {
		this.active = new Set();
		this.listeners = new Set();
		this.announced = conn.announced(Moq.Path.empty());
		this.run();
	}

	async run() {
		try {
			for (;;) {
				const ev = await this.announced.next();
				if (!ev) break;
				if (ev.active) this.active.add(ev.path);
				else this.active.delete(ev.path);
				this.render();
				for (const listener of this.listeners) listener(ev);
			}
		} catch (err) {
			console.warn("discovery ended:", describe(err));
		}
	}

	render() {
		const list = $("discovered");
		const names = [...this.active].sort();
		list.replaceChildren(
			...names.map((name) => {
				const li = document.createElement("li");
				const button = document.createElement("button");
				button.type = "button";
				button.textContent = name;
				button.addEventListener("click", () => {
					$("watch-ns").value = name;
					$("watch-track").focus();
				});
				li.append(button);
				return li;
			}),
		);
		$("discovered-none").hidden = names.length > 0;
		const options = $("namespaces");
		options.replaceChildren(
			...names.map((name) => {
				const option = document.createElement("option");
				option.value = name;
				return option;
			}),
		);
	}
}

// Watch is one watched track: it waits until the track's namespace is
// announced, subscribes, and shows each object as it comes. When the
// publisher leaves it waits for one to come back.
class Watch {
	constructor(conn, discovery, namespace, track) {
		this.conn = conn;
		this.discovery = discovery;
		this.path = Moq.Path.from(namespace);
		this.track = track;
		this.status = $("watch");
		this.onEvent = (ev) => {
			if (ev.path !== this.path || this.stopped) return;
			if (ev.active && !this.sub) this.subscribe();
			if (!ev.active) {
				this.unsubscribe();
				setState(this.status, "waiting", `The publisher of ${this.path} left; waiting for one to come back.`);
			}
		};
		discovery.listeners.add(this.onEvent);
		$("objects").replaceChildren();
		$("watching").textContent = `${this.path} ${track}`;
		if (discovery.active.has(this.path)) {
			this.subscribe();
		} else {
			setState(this.status, "waiting", `Nobody publishes ${this.path} yet; waiting for a publisher.`);
		}
	}

	subscribe() {
		this.broadcast = this.conn.consume(this.path);
		const sub = this.broadcast.subscribe(this.track);
		this.sub = sub;
		setState(this.status, "subscribing", `Subscribed to ${this.path} ${this.track}; waiting for objects.`);
		void Promise.resolve(sub.closed).then((err) => {
			if (this.sub !== sub) return;
			if (err) setState(this.status, "failed", explain(err));
			else setState(this.status, "ended", "The subscription ended.");
		});
		void this.read(sub);
	}

	async read(sub) {
		try {
			for (;;) {
				const group = await sub.recvGroup();
				if (!group || this.sub !== sub) return;
				if (this.status.dataset.state !== "receiving") {
					setState(this.status, "receiving", `Receiving ${this.path} ${this.track} through the relay.`);
				}
				// Groups travel on streams of their own and may overlap.
				void this.readGroup(group);
			}
		} catch (err) {
			// How the subscription ended, which its status tells.
			console.debug("reading groups:", describe(err));
		}
	}

	async readGroup(group) {
		try {
			for (;;) {
				const frame = await group.readFrameSequence();
				if (!frame) break;
				this.show(group.sequence, frame.sequence, frame.payload);
			}
		} catch (err) {
			// The objects read so far are shown; a group's ending is no
			// news to the person watching, so it goes to the console only.
			// (@moq/net 0.3.4 refuses the End of Group status object that
			// moqt pub and moqt clock end their groups with, once it has
			// delivered the group's objects.)
			console.debug(`group ${group.sequence} ended: ${describe(err)}`);
		}
	}

	show(group, object, payload) {
		const list = $("objects");
		const li = document.createElement("li");
		li.dataset.group = String(group);
		li.dataset.object = String(object);
		const where = document.createElement("span");
		where.className = "loc";
		where.textContent = `${group}:${object}`;
		const body = document.createElement("span");
		body.className = "payload";
		body.textContent = text(payload);
		li.append(where, body);
		list.append(li);
		while (list.childElementCount > MAX_SHOWN) list.firstElementChild.remove();
		li.scrollIntoView({ block: "nearest" });
	}

	unsubscribe() {
		const sub = this.sub;
		this.sub = undefined;
		sub?.close();
		this.broadcast?.close();
		this.broadcast = undefined;
	}

	stop() {
		this.stopped = true;
		this.discovery.listeners.delete(this.onEvent);
		this.unsubscribe();
	}
}

// Publisher publishes the page's broadcast, whose one track carries what
// the person types: a group a line, one object each.
//
// The relay subscribes to the track once someone wants it. Each of its
// SUBSCRIBEs is served with a fresh track, empty when @moq/net answers it:
// a track that already held objects would make @moq/net's SUBSCRIBE_OK
// carry LARGEST_OBJECT, which it encodes with a length prefix the spec
// does not have (§9.20), and the relay would close the session. Group IDs
// count on across those tracks, so that a relay that subscribes again gets
// no Group ID twice.
class Publisher {
	constructor(conn, namespace) {
		this.path = Moq.Path.from(namespace);
		this.tracks = new Set(); // the tracks serving the relay's subscriptions
		this.nextGroup = 0;
		this.status = $("publish");
		this.broadcast = new Moq.Broadcast.Producer();
		conn.publish(this.path, this.broadcast);
		this.render();
		void this.serve();
	}

	async serve() {
		for (;;) {
			const request = await this.broadcast.requested();
			if (!request) return;
			if (request.name !== PUBLISHED_TRACK) {
				request.reject(new Error(`no track ${request.name}: this page publishes ${PUBLISHED_TRACK}`));
				continue;
			}
			const track = request.accept();
			this.tracks.add(track);
			this.render();
			void track.unused().then(() => {
				this.tracks.delete(track);
				track.close();
				this.render();
			});
		}
	}

	// send publishes line and reports whether anyone was subscribed.
	send(line) {
		if (this.tracks.size === 0) return false;
		const sequence = this.nextGroup++;
		for (const track of this.tracks) {
			const group = new Moq.Group.Producer(sequence);
			track.writeGroup(group);
			group.writeString(line);
			group.close();
		}
		return true;
	}

	render() {
		this.status.dataset.subscriptions = String(this.tracks.size);
		setState(
			this.status,
			this.tracks.size > 0 ? "subscribed" : "unsubscribed",
			this.tracks.size > 0
				? "The relay is subscribed to your track: what you type goes out."
				: "Nobody is subscribed to your track yet: lines typed now reach no one.",
		);
	}
}

async function main() {
	const conn = $("conn");
	if (typeof WebTransport !== "function") {
		setState(
			conn,
			"failed",
			window.isSecureContext
				? "This browser has no WebTransport. Try a recent Chrome, Edge or Firefox."
				: "WebTransport needs a secure context: open the page as http://127.0.0.1 or http://localhost, or over HTTPS.",
		);
		return;
	}
	const cfg = await (await fetch("config.json")).json();
	$("relay-url").textContent = cfg.url;

	// The page's own broadcast, a fresh name each time it loads.
	const id = Array.from(crypto.getRandomValues(new Uint8Array(3)), (b) => b.toString(16).padStart(2, "0")).join("");
	const namespace = `web/${id}`;
	$("pub-name").textContent = namespace;
	$("pub-track").textContent = PUBLISHED_TRACK;
	$("publish").dataset.namespace = namespace;
	$("sub-cmd").textContent = `moqt sub -lines -sha256 ${cfg.pin} ${cfg.rawURL} ${namespace} ${PUBLISHED_TRACK}`;
	$("watch-ns").value = namespace;
	$("watch-track").value = PUBLISHED_TRACK;

	setState(conn, "connecting", `Connecting to ${cfg.url}…`);
	let pubConn, subConn;
	try {
		[pubConn, subConn] = await Promise.all([connect(cfg), connect(cfg)]);
	} catch (err) {
		setState(
			conn,
			"failed",
			`Could not connect to the relay at ${cfg.url}: ${describe(err)}. Is it running? Its certificate changes when it restarts: reload the page then.`,
		);
		return;
	}
	setState(conn, "connected", `Connected to ${cfg.url} (${pubConn.version}, ${pubConn.transport}).`);
	for (const c of [pubConn, subConn]) {
		void c.closed.then(
			() => setState(conn, "closed", "The relay ended the session. Reload the page once it is back."),
			(err) => setState(conn, "closed", `The session ended: ${describe(err)}. Reload the page once the relay is back.`),
		);
	}

	const publisher = new Publisher(pubConn, namespace);
	const discovery = new Discovery(subConn);
	let watch = new Watch(subConn, discovery, namespace, PUBLISHED_TRACK);

	$("watch-form").addEventListener("submit", (e) => {
		e.preventDefault();
		const ns = $("watch-ns").value.trim();
		const track = $("watch-track").value.trim();
		if (!ns || !track) return;
		watch.stop();
		watch = new Watch(subConn, discovery, ns, track);
	});
	$("send-form").addEventListener("submit", (e) => {
		e.preventDefault();
		const input = $("line");
		const line = input.value;
		// An empty object would end the group for some readers (@moq/net
		// takes an empty Normal object for the end of a group without
		// END_OF_GROUP): nothing to send.
		if (line === "") return;
		const sent = publisher.send(line);
		const note = $("sent");
		note.dataset.count = String(Number(note.dataset.count ?? 0) + (sent ? 1 : 0));
		note.textContent = sent ? `Sent: ${line}` : `Not sent (nobody subscribed): ${line}`;
		input.value = "";
	});
	$("line").disabled = false;
}

void main().catch((err) => setState($("conn"), "failed", `The page failed: ${describe(err)}`));
