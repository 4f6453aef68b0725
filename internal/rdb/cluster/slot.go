// Package cluster is worqr's Redis Cluster connection source: it maps hash
// slots to masters (CLUSTER SHARDS), keeps one redigo pool per master and
// hands out connections that follow MOVED and ASK redirections and retry
// TRYAGAIN and CLUSTERDOWN. Every worqr call carries one hash tag, so a call
// goes to one node: the routing is by tag, not by parsing commands.
package cluster

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Slot returns the hash slot of key, as Redis Cluster computes it: the CRC16
// of the part between the first '{' and the next '}' when that part is not
// empty, else of the whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % Slots
}

// TagSlot returns the slot of the keys of hash tag tag (keys named
// <ns>:{tag}:..., with a namespace that holds no brace).
func TagSlot(tag string) int { return Slot("{" + tag + "}") }
