extends Node
# The reference game in GDScript: the rules of `horizon gameserver`
# (crates/horizon-sdk/src/reference.rs) byte for byte, so that the simulated players' checks
# apply unchanged and a Godot server can take over a region from a Rust one and back.
#
# Each player is an entity with a position and a velocity in integer millimetres. An input is a
# new velocity (three little-endian i32, mm/s) or a place to stand at with velocity zero (three
# little-endian i64, mm); a step moves every entity. A player has entered the world once an
# input of theirs was applied: only those are in `positions`, the places placement uses. `inputs` counts the
# inputs ever applied to an entity and `last_seq` is the last one's seq: applied once and in
# order from 1, `inputs == last_seq` always. The region's `chain` hashes every step onto the
# previous one, so a view's `prev_chain` proves the state it came from. `origin` names the
# simulation (fixed when the region starts empty, carried by snapshots).
#
# A state is a Dictionary: origin, spawn [x, y, z], tick_ms, prev_chain, chain, entities
# {player: [pos x, y, z, vel x, y, z, inputs, last_seq]}. Its bytes (encode) and the views are
# the Rust game's postcard encodings.

const Postcard = preload("res://postcard.gd")


func _ready():
	Horizon.serve(self)


func empty(bubble, _world, bounds):
	var spawn = [0, 0, 0]
	if bounds != null:
		for i in range(3):
			spawn[i] = int((bounds[i] + bounds[i + 3]) * 500.0)
	var origin = bubble
	for v in spawn:
		origin = Postcard.fnv(origin, Postcard.le_bytes_i64(v))
	return {
		"origin": origin, "spawn": spawn, "tick_ms": Horizon.tick_ms,
		"prev_chain": 0, "chain": bubble, "entities": {},
	}


func encode(state):
	var p = Postcard.new().writer()
	p.put_varint(state.origin)
	for v in state.spawn:
		p.put_signed(v)
	p.put_varint(state.tick_ms)
	p.put_varint(state.prev_chain)
	p.put_varint(state.chain)
	_put_entities(p, state.entities)
	return p.bytes()


func decode(bytes):
	var p = Postcard.new().reader(bytes)
	var state = {"origin": p.get_varint(), "spawn": [p.get_signed(), p.get_signed(), p.get_signed()]}
	state.tick_ms = p.get_varint()
	state.prev_chain = p.get_varint()
	state.chain = p.get_varint()
	state.entities = {}
	var n = p.get_varint()
	for _i in range(n):
		if p.failed:
			break
		var player = p.get_varint()
		state.entities[player] = _get_entity(p)
	if p.failed or not p.at_end():
		return "not a reference game state (%d bytes)" % bytes.size()
	return state


func join(state, player, bytes):
	var entity = null
	if bytes.size() > 0:
		var p = Postcard.new().reader(bytes)
		entity = _get_entity(p)
		if p.failed or not p.at_end():
			entity = null
	if entity == null:
		entity = [state.spawn[0], state.spawn[1], state.spawn[2], 0, 0, 0, 0, 0]
	state.entities[player] = entity


func leave(state, player):
	if not state.entities.has(player):
		return PoolByteArray()
	var p = Postcard.new().writer()
	_put_entity(p, state.entities[player])
	state.entities.erase(player)
	return p.bytes()


func input(state, player, seq, bytes):
	if not state.entities.has(player):
		return
	var e = state.entities[player]
	if bytes.size() == 12:
		var r = StreamPeerBuffer.new()
		r.data_array = bytes
		e[3] = r.get_32()
		e[4] = r.get_32()
		e[5] = r.get_32()
	elif bytes.size() == 24:
		var r = StreamPeerBuffer.new()
		r.data_array = bytes
		for i in range(3):
			e[i] = r.get_64()
			e[i + 3] = 0
	e[6] += 1
	e[7] = seq


func step(state, tick):
	var dt = state.tick_ms
	for e in state.entities.values():
		for i in range(3):
			e[i] += e[i + 3] * dt / 1000
	var p = Postcard.new().writer()
	_put_entities(p, state.entities)
	state.prev_chain = state.chain
	state.chain = Postcard.fnv(state.chain ^ tick, p.bytes())


func positions(state):
	var list = []
	for player in state.entities:
		var e = state.entities[player]
		if e[6] > 0:
			list.append([player, e[0] / 1000.0, e[1] / 1000.0, e[2] / 1000.0, e[3] / 1000.0, e[4] / 1000.0, e[5] / 1000.0])
	return list


# The player's own entity right after an input of theirs was applied, sent to them ahead of
# the tick's view: the Rust game's `OwnView` {wall_us, entity}.
func own(state, player):
	if not state.entities.has(player):
		return PoolByteArray()
	var p = Postcard.new().writer()
	p.put_varint(OS.get_system_time_msecs() * 1000)
	_put_entity(p, state.entities[player])
	return p.bytes()


func view(state, tick):
	var p = Postcard.new().writer()
	p.put_varint(tick)
	p.put_varint(OS.get_system_time_msecs() * 1000)
	p.put_varint(state.origin)
	p.put_varint(state.prev_chain)
	p.put_varint(state.chain)
	_put_entities(p, state.entities)
	return p.bytes()


# A BTreeMap<PlayerId, Entity> and a Vec<(PlayerId, Entity)> encode alike: length, then pairs
# in ascending player order.
func _put_entities(p, entities):
	var players = entities.keys()
	players.sort_custom(self, "_unsigned_less")
	p.put_varint(players.size())
	for player in players:
		p.put_varint(player)
		_put_entity(p, entities[player])


# Player ids are u64: one above 2^63 is a negative int here, and sorts after every other.
func _unsigned_less(a, b):
	return (a ^ (-9223372036854775807 - 1)) < (b ^ (-9223372036854775807 - 1))


func _put_entity(p, e):
	for i in range(6):
		p.put_signed(e[i])
	p.put_varint(e[6])
	p.put_varint(e[7])


func _get_entity(p):
	var e = []
	for _i in range(6):
		e.append(p.get_signed())
	e.append(p.get_varint())
	e.append(p.get_varint())
	return e
