extends Node
# The `Horizon` autoload: this Godot process's link to its horizon-sdk sidecar
# (`horizon godot-server`), which speaks the QUIC agent protocol with the site's agent and
# drives the game through the methods below. The game is any object with these methods, the
# same as horizon-sdk's `Game` trait (docs/godot.md); each must be deterministic:
#
#   empty(bubble: int, world: int, bounds) -> state   # bounds: null or [min x, y, z, max x, y, z]
#   encode(state) -> PoolByteArray                    # the whole state (snapshots, backups)
#   decode(bytes: PoolByteArray) -> state, or a String saying what is wrong with the bytes
#   join(state, player: int, bytes: PoolByteArray)    # bytes: the player's state, empty if new
#   leave(state, player: int) -> PoolByteArray        # the player's state, for where it goes
#   input(state, player: int, seq: int, bytes: PoolByteArray)   # once each, in seq order
#   step(state, tick: int)                            # advance the region to `tick`
#   view(state, tick: int) -> PoolByteArray           # what the region's players see
#
# and, if the game has them (each optional):
#
#   lease_granted(state, bubble: int, epoch: int)     # the region may be written from now on
#   lease_lost(state)                                 # ... and no longer: stop changing what
#                                                     # players see (lease lapsed, sealed for a
#                                                     # handover, released, agent lost)
#   positions(state) -> Array                         # [[player, x, y, z, vx, vy, vz], ...]:
#                                                     # where the game put its players (metres,
#                                                     # m/s), once a second; placement uses only
#                                                     # these, never what clients claim
#
# A state is a Dictionary or an Object (join, input and step change it in place). The sidecar
# calls step only while the region's lease is valid by the server's own clock, each input
# once and in order, and replays a handover's joins, leaves, inputs and steps on the target
# through these same methods: a game stepped only by them need not know about leases, epochs
# or handovers. A game that also does things on its own (timers, physics, talking to other
# services) does them only between lease_granted and lease_lost.
#
# The engine's main loop advances when the sidecar calls: between calls Godot sleeps in the
# link's socket (an idle server costs no CPU), and after each batch of calls the engine runs
# one iteration (at least once a second: the sidecar's watchdog pings an idle link). So the
# game never relies on `_process`, timers or physics frames: only on these methods.
#
# Call `Horizon.serve(game)` once, from the main scene's `_ready`. The link's address comes
# from the command line (`-- --horizon-link=PORT`, set by the sidecar). When the link ends
# (the sidecar stopped or died) this process quits: a game server never outlives its link.

signal linked(server_name, site)
signal region_started(state)
signal region_dropped(state)
signal player_joined(state, player)
signal player_left(state, player)
signal stepped(state, tick)
signal lease_granted(state, bubble, epoch)
signal lease_lost(state)

const PROTOCOL = 4
const CONNECT_WITHIN_MS = 10000

enum Op { HELLO = 0, EMPTY, ENCODE, DECODE, JOIN, LEAVE, INPUT, STEP, VIEW, DROP, PING, LEASE, LAPSE, POSITIONS, OWN }
enum Status { OK = 0, REFUSED = 1, BROKEN = 2 }

# Exit codes (also the sidecar's, docs/godot.md).
const EXIT_LINK_ENDED = 0
const EXIT_BAD_USE = 64
const EXIT_NO_LINK = 69
const EXIT_GAME_BROKEN = 70

var server_name = ""
var site = ""
var tick_ms = 0

var _game = null
var _peer = StreamPeerTCP.new()
var _started_ms = 0
var _states = {}
var _said_hello = false


func serve(game):
	for method in ["empty", "encode", "decode", "join", "leave", "input", "step", "view"]:
		if not game.has_method(method):
			_fail(EXIT_BAD_USE, "the game has no method %s" % method)
			return
	_game = game
	var port = 0
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--horizon-link="):
			port = int(arg.split("=")[1])
	if port <= 0 or port > 65535:
		_fail(EXIT_BAD_USE, "no --horizon-link=PORT on the command line: start me with horizon godot-server")
		return
	_started_ms = OS.get_ticks_msec()
	if _peer.connect_to_host("127.0.0.1", port) != OK:
		_fail(EXIT_NO_LINK, "cannot dial the sidecar on 127.0.0.1:%d" % port)
		return
	_peer.set_no_delay(true)


func _process(_delta):
	if _game == null:
		return
	match _peer.get_status():
		StreamPeerTCP.STATUS_CONNECTING:
			if OS.get_ticks_msec() - _started_ms > CONNECT_WITHIN_MS:
				_fail(EXIT_NO_LINK, "the sidecar did not answer within %d ms" % CONNECT_WITHIN_MS)
			return
		StreamPeerTCP.STATUS_CONNECTED:
			pass
		_:
			if not _said_hello:
				_fail(EXIT_NO_LINK, "could not reach the sidecar")
			else:
				_quit(EXIT_LINK_ENDED, "the link to the sidecar ended")
			return
	# Wait for the sidecar's next frame: Godot sleeps in the socket between calls (no CPU spent
	# polling), then takes every frame already there and lets the engine run one iteration.
	while true:
		var head = _peer.get_data(4)
		if head[0] != OK:
			_quit(EXIT_LINK_ENDED, "the link to the sidecar ended")
			return
		var length = head[1][0] | head[1][1] << 8 | head[1][2] << 16 | head[1][3] << 24
		if length < 5:
			_fail(EXIT_GAME_BROKEN, "a link frame of %d bytes" % length)
			return
		var body = _peer.get_data(length)
		if body[0] != OK:
			_quit(EXIT_LINK_ENDED, "the link to the sidecar ended")
			return
		var frame = StreamPeerBuffer.new()
		frame.data_array = body[1]
		if not _handle(frame):
			return
		if _peer.get_available_bytes() == 0:
			return


func _handle(f):
	var op = f.get_u8()
	var handle = f.get_u32()
	if not _said_hello and op != Op.HELLO:
		return _fail(EXIT_GAME_BROKEN, "the sidecar spoke before its hello")
	if op in [Op.ENCODE, Op.JOIN, Op.LEAVE, Op.INPUT, Op.STEP, Op.VIEW, Op.LEASE, Op.LAPSE, Op.POSITIONS, Op.OWN] and not _states.has(handle):
		return _fail(EXIT_GAME_BROKEN, "the sidecar named state %d, which does not exist" % handle)
	var held = _states.get(handle)
	match op:
		Op.HELLO:
			var version = handle
			if version != PROTOCOL:
				return _fail(EXIT_BAD_USE, "link protocol %d, this addon speaks %d" % [version, PROTOCOL])
			tick_ms = f.get_u32()
			server_name = _string(f)
			site = _string(f)
			_said_hello = true
			# The link key proves to the sidecar that this is the process it started.
			var key = OS.get_environment("HORIZON_LINK_KEY")
			_reply(op, Status.OK, (key + "\n" + Engine.get_version_info()["string"]).to_utf8())
			emit_signal("linked", server_name, site)
		Op.EMPTY:
			var bubble = f.get_u64()
			var world = f.get_u32()
			var bounds = null
			if f.get_u8() == 1:
				bounds = []
				for _i in range(6):
					bounds.append(f.get_double())
			var state = _game.empty(bubble, world, bounds)
			if not _is_state(state):
				return _fail(EXIT_GAME_BROKEN, "empty() returned no Dictionary or Object")
			_states[handle] = state
			emit_signal("region_started", state)
		Op.ENCODE:
			var bytes = _game.encode(held)
			if typeof(bytes) != TYPE_RAW_ARRAY:
				return _fail(EXIT_GAME_BROKEN, "encode() returned no PoolByteArray")
			_reply(op, Status.OK, bytes)
		Op.DECODE:
			var state = _game.decode(_bytes(f))
			if typeof(state) == TYPE_STRING:
				_reply(op, Status.REFUSED, state.to_utf8())
			elif _is_state(state):
				_states[handle] = state
				_reply(op, Status.OK, PoolByteArray())
				emit_signal("region_started", state)
			else:
				return _fail(EXIT_GAME_BROKEN, "decode() returned no state and no String")
		Op.JOIN:
			var player = f.get_u64()
			_game.join(held, player, _bytes(f))
			emit_signal("player_joined", held, player)
		Op.LEAVE:
			var player = f.get_u64()
			var bytes = _game.leave(held, player)
			if typeof(bytes) != TYPE_RAW_ARRAY:
				return _fail(EXIT_GAME_BROKEN, "leave() returned no PoolByteArray")
			_reply(op, Status.OK, bytes)
			emit_signal("player_left", held, player)
		Op.INPUT:
			var player = f.get_u64()
			var seq = f.get_u64()
			_game.input(held, player, seq, _bytes(f))
		Op.STEP:
			var tick = f.get_u64()
			_game.step(held, tick)
			emit_signal("stepped", held, tick)
		Op.VIEW:
			var bytes = _game.view(held, f.get_u64())
			if typeof(bytes) != TYPE_RAW_ARRAY:
				return _fail(EXIT_GAME_BROKEN, "view() returned no PoolByteArray")
			_reply(op, Status.OK, bytes)
		Op.DROP:
			_states.erase(handle)
			if held != null:
				emit_signal("region_dropped", held)
		Op.PING:
			_reply(op, Status.OK, PoolByteArray())
		Op.LEASE:
			var bubble = f.get_u64()
			var epoch = f.get_u64()
			if _game.has_method("lease_granted"):
				_game.lease_granted(held, bubble, epoch)
			emit_signal("lease_granted", held, bubble, epoch)
		Op.LAPSE:
			if _game.has_method("lease_lost"):
				_game.lease_lost(held)
			emit_signal("lease_lost", held)
		Op.POSITIONS:
			# u32 count, then per player: u64 id, six f64 (position, velocity), little-endian.
			var w = StreamPeerBuffer.new()
			var list = []
			if _game.has_method("positions"):
				list = _game.positions(held)
			if typeof(list) != TYPE_ARRAY:
				return _fail(EXIT_GAME_BROKEN, "positions() returned no Array")
			w.put_u32(list.size())
			for p in list:
				if typeof(p) != TYPE_ARRAY or p.size() != 7:
					return _fail(EXIT_GAME_BROKEN, "positions() gave an entry that is not [player, x, y, z, vx, vy, vz]")
				w.put_u64(p[0])
				for i in range(1, 7):
					w.put_double(p[i])
			_reply(op, Status.OK, w.data_array)
		Op.OWN:
			# The player's own state right after an input of theirs, sent to them ahead of the
			# tick's view; a game without own() sends nothing early.
			var player = f.get_u64()
			var bytes = PoolByteArray()
			if _game.has_method("own"):
				bytes = _game.own(held, player)
			if typeof(bytes) != TYPE_RAW_ARRAY:
				return _fail(EXIT_GAME_BROKEN, "own() returned no PoolByteArray")
			_reply(op, Status.OK, bytes)
		_:
			return _fail(EXIT_GAME_BROKEN, "unknown link op %d" % op)
	return true


func _is_state(v):
	return typeof(v) == TYPE_DICTIONARY or typeof(v) == TYPE_OBJECT


func _bytes(f):
	var n = f.get_u32()
	if n == 0:
		return PoolByteArray()
	return f.get_data(n)[1]


func _string(f):
	return _bytes(f).get_string_from_utf8()


# Replies: u32 length, u8 op, u8 status, u32 length of the bytes, the bytes.
func _reply(op, status, bytes):
	var w = StreamPeerBuffer.new()
	w.put_u32(1 + 1 + 4 + bytes.size())
	w.put_u8(op)
	w.put_u8(status)
	w.put_u32(bytes.size())
	w.put_data(bytes)
	_peer.put_data(w.data_array)


# The game or the link is unusable: say why, tell the sidecar, and exit with `code`.
func _fail(code, why):
	printerr("horizon: ", why)
	if _peer.get_status() == StreamPeerTCP.STATUS_CONNECTED:
		_reply(Op.PING, Status.BROKEN, why.to_utf8())
	_quit(code, why)
	return false


func _quit(code, why):
	print("horizon: exiting (%d): %s" % [code, why])
	_game = null
	_peer.disconnect_from_host()
	get_tree().quit(code)
