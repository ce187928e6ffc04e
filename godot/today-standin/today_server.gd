# A stand-in for today's game server: what Horizon's adapter for today's servers drives.
#
# One orchestrator at a time dials it on WebSocket and sends JSON text frames
# `{"namespace": ..., "event": ..., "data": ...}`:
#   server/prewarm  {}                         load the world: chunks_loading counts down to 0
#   server/zone     [{id, world, bounds}, ...] the zones to simulate, the whole set each time;
#                                              a zone left out is dropped with its players;
#                                              [] releases the server. bounds: {min, max} or null
#   player/move     {id, zone, position?, velocity?}
#                                              a player of a zone: placed at `position` (joining
#                                              if new), moving at `velocity` m/s from now on
#   player/leave    {id, zone}                 the player leaves the zone
# and it sends:
#   players/position {zone, players: [{id, position, out_of_zone}]}   every 50 ms per zone
#   serverinfo/report {tps, chunks_loading, players_number, zones}      every second
#
# It simulates every zone it holds at 60 ticks per second on its own, with no lease and no
# epoch: as today's servers, it believes whoever dialled it. Exit codes: 0 when the
# orchestrator closed the link after a prewarm, 64 on bad command-line arguments, 69 when the
# port cannot be listened on.

extends Node

const EXIT_BAD_USE = 64
const EXIT_NO_PORT = 69
const REPORT_EVERY_MS = 50
const CHUNKS_TO_LOAD = 4
const CHUNK_LOAD_MS = 200

var _server = WebSocketServer.new()
var _peer_id = 0
# zone id -> {world, bounds, players: {player id (String) -> {position: Vector3, velocity: Vector3}}}
var _zones = {}
var _chunks_loading = 0
var _next_chunk_ms = 0
var _ticks = 0
var _tps = 0
var _second_ms = 0
var _report_ms = 0
var _prewarmed = false


func _ready():
	var port = 8980
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--port="):
			port = int(arg.split("=")[1])
			if port <= 0 or port > 65535:
				_quit(EXIT_BAD_USE, "bad --port: %s" % arg)
				return
	_server.connect("client_connected", self, "_on_connected")
	_server.connect("client_disconnected", self, "_on_disconnected")
	_server.connect("data_received", self, "_on_data")
	if _server.listen(port) != OK:
		_quit(EXIT_NO_PORT, "cannot listen on port %d" % port)
		return
	print("today-server: listening on %d" % port)
	_second_ms = OS.get_ticks_msec()
	_report_ms = _second_ms


func _on_connected(id, _protocol):
	if _peer_id != 0:
		# One orchestrator at a time.
		_server.disconnect_peer(id, 1008, "another orchestrator holds this server")
		return
	_peer_id = id
	_server.get_peer(id).set_write_mode(WebSocketPeer.WRITE_MODE_TEXT)


func _on_disconnected(id, _clean):
	if id != _peer_id:
		return
	_peer_id = 0
	_zones = {}
	if _prewarmed:
		_quit(0, "the orchestrator left")


func _on_data(id):
	var text = _server.get_peer(id).get_packet().get_string_from_utf8()
	if id != _peer_id:
		return
	var parsed = JSON.parse(text)
	if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
		printerr("today-server: not a JSON object: ", text.left(200))
		return
	var msg = parsed.result
	var what = "%s/%s" % [msg.get("namespace", ""), msg.get("event", "")]
	var data = msg.get("data")
	match what:
		"server/prewarm":
			_prewarmed = true
			_chunks_loading = CHUNKS_TO_LOAD
			_next_chunk_ms = OS.get_ticks_msec() + CHUNK_LOAD_MS
		"server/zone":
			_set_zones(data)
		"player/move":
			_move(data)
		"player/leave":
			if typeof(data) == TYPE_DICTIONARY and _zones.has(str(data.get("zone"))):
				_zones[str(data.get("zone"))].players.erase(_key(data.get("id")))
		_:
			printerr("today-server: unknown message ", what)


func _set_zones(list):
	if typeof(list) != TYPE_ARRAY:
		printerr("today-server: server/zone wants a list")
		return
	var kept = {}
	for z in list:
		if typeof(z) != TYPE_DICTIONARY or not z.has("id"):
			continue
		var id = str(z.id)
		var players = _zones[id].players if _zones.has(id) else {}
		kept[id] = {"world": z.get("world"), "bounds": z.get("bounds"), "players": players}
	_zones = kept


func _move(data):
	if typeof(data) != TYPE_DICTIONARY or not _zones.has(str(data.get("zone"))):
		return
	var players = _zones[str(data.get("zone"))].players
	var key = _key(data.get("id"))
	if not players.has(key):
		players[key] = {"position": Vector3(), "velocity": Vector3()}
	if data.has("position"):
		players[key].position = _vec(data.position)
	if data.has("velocity"):
		players[key].velocity = _vec(data.velocity)


func _physics_process(delta):
	_ticks += 1
	for id in _zones:
		for key in _zones[id].players:
			var p = _zones[id].players[key]
			p.position += p.velocity * delta


func _process(_delta):
	_server.poll()
	var now = OS.get_ticks_msec()
	if _chunks_loading > 0 and now >= _next_chunk_ms:
		_chunks_loading -= 1
		_next_chunk_ms = now + CHUNK_LOAD_MS
	if now - _report_ms >= REPORT_EVERY_MS:
		_report_ms = now
		for id in _zones:
			_send("players", "position", {"zone": id, "players": _positions(_zones[id])})
	if now - _second_ms >= 1000:
		_tps = _ticks * 1000 / (now - _second_ms)
		_ticks = 0
		_second_ms = now
		var players = 0
		for id in _zones:
			players += _zones[id].players.size()
		_send("serverinfo", "report", {
			"tps": _tps, "chunks_loading": _chunks_loading,
			"players_number": players, "zones": _zones.size()})


func _positions(zone):
	var out = []
	for key in zone.players:
		var p = zone.players[key].position
		out.append({"id": key, "position": [p.x, p.y, p.z], "out_of_zone": not _inside(zone.bounds, p)})
	return out


func _inside(bounds, p):
	if typeof(bounds) != TYPE_DICTIONARY:
		return true
	var lo = _vec(bounds.get("min"))
	var hi = _vec(bounds.get("max"))
	return p.x >= lo.x and p.y >= lo.y and p.z >= lo.z and p.x < hi.x and p.y < hi.y and p.z < hi.z


# JSON numbers are floats in Godot: a player id travels as a decimal string to stay exact.
func _key(id):
	return str(id)


func _vec(a):
	if typeof(a) != TYPE_ARRAY or a.size() != 3:
		return Vector3()
	return Vector3(float(a[0]), float(a[1]), float(a[2]))


func _send(namespace, event, data):
	if _peer_id == 0:
		return
	var text = JSON.print({"namespace": namespace, "event": event, "data": data})
	_server.get_peer(_peer_id).put_packet(text.to_utf8())


func _quit(code, why):
	print("today-server: exiting (%d): %s" % [code, why])
	_server.stop()
	get_tree().quit(code)
