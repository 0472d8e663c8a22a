//! The partition Java's Kafka producer (and librdkafka's `murmur2_random`,
//! which the relay and the Python client use) gives a key: murmur2 of the
//! key, made positive, modulo the partitions. A record on another partition
//! was produced by a client that partitions otherwise (librdkafka's default
//! is CRC32), so that a user's events may be split between partitions,
//! whose joins never meet.

/// The partition of `key` among `partitions` (at least 1).
pub fn java_partition(key: &[u8], partitions: usize) -> i32 {
    let positive = murmur2(key) & 0x7fff_ffff;
    (positive % partitions.max(1) as u32) as i32
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (index, &byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(byte) << (8 * index);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::murmur2;

    #[test]
    fn murmur2_gives_kafkas_values() {
        // Kafka's own unit test of Utils.murmur2, and keys of one to five digits.
        for (key, hash) in [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("1", -1_993_445_489),
            ("12", 126_087_238),
            ("123", -267_702_483),
            ("1234", -1_614_185_708),
            ("12345", -1_188_365_604),
        ] {
            assert_eq!(murmur2(key.as_bytes()) as i32, hash, "{key}");
        }
    }
}
