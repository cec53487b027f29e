//! A pushed pack read once before anything is stored: its header, each entry's declared and actual inflated size, and its checksum, so that a pack bomb (a huge blob of zeros compressed) or a malformed pack is refused fast, with bounded memory.
use sha1::{Digest, Sha1};

/// The limits a pushed pack must keep.
#[derive(Debug, Clone, Copy)]
pub struct PackLimits {
    /// Objects in one pack.
    pub objects: u32,
    /// Inflated bytes of one object (or of one delta's instructions).
    pub object_bytes: u64,
    /// Inflated bytes of the whole pack.
    pub total_bytes: u64,
}

impl Default for PackLimits {
    fn default() -> Self {
        Self {
            objects: 10_000,
            // A file is at most the body limit (1 MiB by default) as YAML; room for the
            // largest the service takes, not for what git would carry for a code repository.
            object_bytes: 8 * 1024 * 1024,
            total_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Reads `pack` through: the number of objects, or why it is refused.
pub fn scan(pack: &[u8], limits: PackLimits) -> Result<u32, String> {
    if pack.len() < 32 || &pack[..4] != b"PACK" {
        return Err("the pack is not a git pack".into());
    }
    let version = u32::from_be_bytes(pack[4..8].try_into().expect("4 bytes"));
    if version != 2 && version != 3 {
        return Err(format!("pack version {version} is not supported"));
    }
    let count = u32::from_be_bytes(pack[8..12].try_into().expect("4 bytes"));
    if count > limits.objects {
        return Err(format!(
            "the pack holds {count} objects, more than the {} a push may carry",
            limits.objects
        ));
    }
    let body_end = pack.len() - 20;
    if Sha1::digest(&pack[..body_end])[..] != pack[body_end..] {
        return Err("the pack's checksum does not match its bytes".into());
    }
    let mut at = 12usize;
    let mut total = 0u64;
    for i in 0..count {
        let (kind, size, header) = entry_header(&pack[at..body_end])
            .ok_or_else(|| format!("object {i} of the pack has a malformed header"))?;
        at += header;
        let delta = kind == 6 || kind == 7;
        match kind {
            1..=4 => {}
            6 => {
                // The base's offset: a variable-length number.
                let used = pack[at..body_end]
                    .iter()
                    .position(|b| b & 0x80 == 0)
                    .ok_or_else(|| format!("object {i} of the pack is cut short"))?;
                at += used + 1;
            }
            7 => {
                if body_end - at < 20 {
                    return Err(format!("object {i} of the pack is cut short"));
                }
                at += 20;
            }
            other => {
                return Err(format!(
                    "object {i} of the pack has the unknown type {other}"
                ))
            }
        }
        if size > limits.object_bytes {
            return Err(format!(
                "object {i} of the pack inflates to {size} bytes, more than the {} a pushed object may have",
                limits.object_bytes
            ));
        }
        let (used, head) = inflated_exactly(&pack[at..body_end], size)
            .ok_or_else(|| format!("object {i} of the pack does not inflate to its size"))?;
        at += used;
        // A delta's header size is that of its instructions; what it makes is named at the
        // start of them (the base's size, then the result's), and a few bytes of copy
        // instructions can make gigabytes: the result is what counts.
        let made = if delta {
            delta_result_size(&head)
                .ok_or_else(|| format!("object {i} of the pack is a malformed delta"))?
        } else {
            size
        };
        if made > limits.object_bytes {
            return Err(format!(
                "object {i} of the pack inflates to {made} bytes, more than the {} a pushed object may have",
                limits.object_bytes
            ));
        }
        total += made;
        if total > limits.total_bytes {
            return Err(format!(
                "the pack inflates to more than the {} bytes a push may carry",
                limits.total_bytes
            ));
        }
    }
    if at != body_end {
        return Err("the pack has bytes after its last object".into());
    }
    Ok(count)
}

/// An entry's type, its declared inflated size, and the bytes its header took.
fn entry_header(bytes: &[u8]) -> Option<(u8, u64, usize)> {
    let first = *bytes.first()?;
    let kind = (first >> 4) & 7;
    let mut size = u64::from(first & 0x0f);
    let mut shift = 4;
    let mut used = 1;
    let mut byte = first;
    while byte & 0x80 != 0 {
        byte = *bytes.get(used)?;
        used += 1;
        if shift > 56 {
            return None;
        }
        size |= u64::from(byte & 0x7f) << shift;
        shift += 7;
    }
    Some((kind, size, used))
}

/// The compressed bytes of a zlib stream at the start of `bytes` that inflates to exactly
/// `size` bytes (inflated in small steps: never more than `size` plus a step is produced).
fn inflated_exactly(bytes: &[u8], size: u64) -> Option<(usize, Vec<u8>)> {
    let mut z = flate2::Decompress::new(true);
    let mut out = [0u8; 16 * 1024];
    // The first bytes inflated: a delta's sizes are there.
    let mut head = Vec::with_capacity(20);
    loop {
        let (read, made) = (z.total_in(), z.total_out());
        let status = z
            .decompress(
                &bytes[read as usize..],
                &mut out,
                flate2::FlushDecompress::None,
            )
            .ok()?;
        let now = (z.total_out() - made) as usize;
        if head.len() < 20 {
            let take = now.min(20 - head.len());
            head.extend_from_slice(&out[..take]);
        }
        if z.total_out() > size {
            return None;
        }
        if status == flate2::Status::StreamEnd {
            return (z.total_out() == size).then_some((z.total_in() as usize, head));
        }
        if z.total_in() == read && z.total_out() == made {
            return None; // no progress: the stream is cut short
        }
    }
}

/// The size of what a delta makes: the second of the two sizes its instructions start with.
fn delta_result_size(head: &[u8]) -> Option<u64> {
    let mut at = 0;
    let mut varint = || {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *head.get(at)?;
            at += 1;
            if shift > 56 {
                return None;
            }
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
    };
    let _base = varint()?;
    varint()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A pack of `objects` (type, content), each stored whole.
    fn pack(objects: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = b"PACK".to_vec();
        out.extend_from_slice(&2u32.to_be_bytes());
        out.extend_from_slice(&(objects.len() as u32).to_be_bytes());
        for (kind, data) in objects {
            let mut size = data.len() as u64;
            let mut byte = (kind << 4) | (size & 0x0f) as u8;
            size >>= 4;
            while size > 0 {
                out.push(byte | 0x80);
                byte = (size & 0x7f) as u8;
                size >>= 7;
            }
            out.push(byte);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(data).unwrap();
            out.extend_from_slice(&z.finish().unwrap());
        }
        let digest = Sha1::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    #[test]
    fn a_well_formed_pack_is_counted() {
        let p = pack(&[(3, b"aws: []\n".to_vec()), (3, vec![b'x'; 100_000])]);
        assert_eq!(scan(&p, PackLimits::default()), Ok(2));
    }

    #[test]
    fn a_bomb_is_refused_from_its_header_without_inflating_it() {
        // 64 MiB of zeros compress to about 64 KiB.
        let p = pack(&[(3, vec![0u8; 64 * 1024 * 1024])]);
        assert!(p.len() < 200_000, "{}", p.len());
        let started = std::time::Instant::now();
        let e = scan(&p, PackLimits::default()).unwrap_err();
        assert!(e.contains("inflates to 67108864 bytes"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[test]
    fn a_delta_is_counted_by_what_it_makes() {
        // A ref-delta of 9 bytes of instructions that says it makes 64 MiB.
        let mut delta = vec![0x08]; // the base: 8 bytes
        let mut result = 64u64 * 1024 * 1024;
        while result >= 0x80 {
            delta.push((result as u8 & 0x7f) | 0x80);
            result >>= 7;
        }
        delta.push(result as u8);
        delta.push(0x90); // copy, size in the next byte
        delta.push(0x08);
        let mut p = b"PACK".to_vec();
        p.extend_from_slice(&2u32.to_be_bytes());
        p.extend_from_slice(&1u32.to_be_bytes());
        p.push((7 << 4) | delta.len() as u8);
        p.extend_from_slice(&[0x11; 20]);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&delta).unwrap();
        p.extend_from_slice(&z.finish().unwrap());
        let digest = Sha1::digest(&p);
        p.extend_from_slice(&digest);
        let e = scan(&p, PackLimits::default()).unwrap_err();
        assert!(e.contains("inflates to 67108864 bytes"), "{e}");
    }

    #[test]
    fn a_size_that_lies_or_a_bad_checksum_is_refused() {
        let mut p = pack(&[(3, b"aws: []\n".to_vec())]);
        // Declare 7 bytes where 8 inflate: the header's low bits.
        p[12] = (3 << 4) | 7;
        let body = p.len() - 20;
        let digest = Sha1::digest(&p[..body]);
        p[body..].copy_from_slice(&digest);
        assert!(scan(&p, PackLimits::default())
            .unwrap_err()
            .contains("does not inflate"));
        let mut q = pack(&[(3, b"aws: []\n".to_vec())]);
        let last = q.len() - 1;
        q[last] ^= 1;
        assert!(scan(&q, PackLimits::default())
            .unwrap_err()
            .contains("checksum"));
        let many = pack(&vec![(3u8, b"a".to_vec()); 3]);
        let small = PackLimits {
            objects: 2,
            ..Default::default()
        };
        assert!(scan(&many, small).unwrap_err().contains("3 objects"));
    }
}
