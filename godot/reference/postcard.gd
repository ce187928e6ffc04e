extends Reference
# The few postcard encodings the reference game needs (https://postcard.jamesmunns.com's wire
# format, as Rust's `postcard` crate writes it): unsigned integers as LEB128 varints, signed
# ones zigzag-encoded first, sequences and maps with a varint length first, structs and arrays
# as their fields in order. GDScript's int is a 64-bit two's complement integer whose
# arithmetic wraps: a u64 above 2^63 is held as the negative int of the same bits.

var w = StreamPeerBuffer.new()
var r = StreamPeerBuffer.new()
var failed = false


func writer():
	w = StreamPeerBuffer.new()
	return self


func bytes():
	return w.data_array


func put_varint(v):
	while true:
		var b = v & 0x7f
		v = (v >> 7) & 0x01ffffffffffffff
		if v == 0:
			w.put_u8(b)
			return
		w.put_u8(b | 0x80)


func put_signed(v):
	put_varint((v << 1) ^ (v >> 63))


func reader(bytes):
	r = StreamPeerBuffer.new()
	r.data_array = bytes
	failed = false
	return self


func at_end():
	return r.get_available_bytes() == 0


func get_varint():
	var v = 0
	var shift = 0
	while shift < 70:
		if r.get_available_bytes() == 0:
			failed = true
			return 0
		var b = r.get_u8()
		v |= (b & 0x7f) << shift
		if b & 0x80 == 0:
			return v
		shift += 7
	failed = true
	return 0


func get_signed():
	var n = get_varint()
	return ((n >> 1) & 0x7fffffffffffffff) ^ -(n & 1)


# FNV-1a, 64 bits, seeded: the reference game's hash (reference.rs `fnv`).
static func fnv(start, bytes):
	var h = start ^ -3750763034362895579 # 0xcbf29ce484222325
	for b in bytes:
		h ^= b
		h *= 1099511628211 # 0x100000001b3, wrapping
	return h


static func le_bytes_i64(v):
	var b = StreamPeerBuffer.new()
	b.put_64(v)
	return b.data_array
