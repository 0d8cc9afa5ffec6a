//! Random secrets for what a broker must not share with anyone else on the host or network
//! (an Erlang distribution cookie): from the kernel's CSPRNG, never from a name or a clock.

use std::io::Read;

/// `bytes` random bytes from `/dev/urandom`, as lowercase hex (two characters per byte).
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut raw = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hex_of_the_asked_length_and_differ() {
        let first = random_hex(32).expect("urandom reads");
        let second = random_hex(32).expect("urandom reads");
        assert_eq!(first.len(), 64);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(first, second);
    }
}
