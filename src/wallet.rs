//! Wallet address validation per network (CONTRACT §5): EVM addresses are `0x` + 40 hex and,
//! when mixed-case, must pass the EIP-55 checksum; Solana addresses are base58 of 32 bytes.

use payroll_entities::Network;
use sha3::{Digest, Keccak256};

/// The shapes of an address, for the OpenAPI document: EVM (0x and 40 hex), the zero address
/// among them, and Solana (base58). The EIP-55 checksum of a mixed-case EVM address and the 32
/// bytes of a Solana key are checked by [`validate`] alone.
pub const EVM_PATTERN: &str = r"^\s*0x[0-9a-fA-F]{40}\s*$";
pub const ZERO_PATTERN: &str = r"^\s*0x0{40}\s*$";
pub const SOLANA_PATTERN: &str = r"^\s*[1-9A-HJ-NP-Za-km-z]{32,44}\s*$";

/// `Ok` if `address` is valid on `network`, else why not.
pub fn validate(network: Network, address: &str) -> Result<(), String> {
    if network.is_evm() {
        validate_evm(address)
    } else {
        validate_solana(address)
    }
}

fn validate_evm(address: &str) -> Result<(), String> {
    let Some(hex_part) = address.strip_prefix("0x") else {
        return Err("an EVM address starts with 0x".into());
    };
    if hex_part.len() != 40 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("an EVM address is 0x followed by 40 hexadecimal characters".into());
    }
    if hex_part.bytes().all(|b| b == b'0') {
        return Err("the zero address burns what is sent to it".into());
    }
    let has_lower = hex_part.bytes().any(|b| b.is_ascii_lowercase());
    let has_upper = hex_part.bytes().any(|b| b.is_ascii_uppercase());
    if has_lower && has_upper && eip55_checksum(hex_part) != hex_part {
        return Err(
            "the mixed-case address fails its EIP-55 checksum: check it for typos, or send it all lower-case"
                .into(),
        );
    }
    Ok(())
}

/// The EIP-55 spelling of 40 hex characters.
fn eip55_checksum(hex_part: &str) -> String {
    let lower = hex_part.to_ascii_lowercase();
    let hash = Keccak256::digest(lower.as_bytes());
    lower
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
            if c.is_ascii_alphabetic() && nibble >= 8 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn validate_solana(address: &str) -> Result<(), String> {
    match bs58::decode(address).into_vec() {
        Ok(bytes) if bytes.len() == 32 => Ok(()),
        Ok(_) => Err("a Solana address is base58 of 32 bytes".into()),
        Err(_) => Err("a Solana address is base58 (no 0, O, I or l)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Test vectors of EIP-55.
    const CHECKSUMMED: &[&str] = &[
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn eip55_vectors_pass() {
        for a in CHECKSUMMED {
            assert_eq!(validate(Network::Ethereum, a), Ok(()), "{a}");
        }
    }

    #[test]
    fn a_single_case_flip_fails_the_checksum() {
        let bad = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD";
        assert!(validate(Network::Base, bad).is_err());
        assert_eq!(validate(Network::Base, &bad.to_ascii_lowercase()), Ok(()));
    }

    #[test]
    fn malformed_evm_addresses_fail() {
        assert!(validate(Network::Polygon, "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").is_err());
        assert!(validate(Network::Polygon, "0x1234").is_err());
        assert!(
            validate(
                Network::Polygon,
                "0xZZZeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
            )
            .is_err()
        );
    }

    #[test]
    fn the_zero_address_is_refused() {
        let zero = format!("0x{}", "0".repeat(40));
        assert!(validate(Network::Ethereum, &zero).is_err());
    }

    #[test]
    fn solana_addresses_are_32_bytes_of_base58() {
        assert_eq!(
            validate(
                Network::Solana,
                "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T"
            ),
            Ok(())
        );
        assert!(
            validate(
                Network::Solana,
                "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
            )
            .is_err()
        );
        assert!(validate(Network::Solana, "abc").is_err());
    }
}
