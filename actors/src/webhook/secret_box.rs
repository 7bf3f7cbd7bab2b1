//! Webhook secrets at rest: sealed with ChaCha20-Poly1305 under a key derived from
//! `auth.key_pepper`, so the database alone does not reveal them.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use rand::RngCore;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sha2::Sha256;

/// Seals and opens secrets.
pub struct SecretBox {
    key: LessSafeKey,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox([redacted])")
    }
}

/// A sealed value that does not open: wrong pepper or damaged row.
#[derive(Debug, thiserror::Error)]
#[error("a webhook secret cannot be sealed or opened (was auth.key_pepper changed?)")]
pub struct SealError;

impl SecretBox {
    /// The box of a pepper (the same pepper always gives the same key).
    pub fn from_pepper(pepper: &[u8]) -> Result<SecretBox, SealError> {
        let mut mac = Hmac::<Sha256>::new_from_slice(pepper).map_err(|_| SealError)?;
        mac.update(b"payroll webhook secrets v1");
        let derived = mac.finalize().into_bytes();
        let key = UnboundKey::new(&CHACHA20_POLY1305, &derived).map_err(|_| SealError)?;
        Ok(SecretBox {
            key: LessSafeKey::new(key),
        })
    }

    /// `base64(nonce ‖ ciphertext ‖ tag)`.
    pub fn seal(&self, plain: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::thread_rng().fill_bytes(&mut nonce);
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
            .map_err(|_| SealError)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(STANDARD.encode(out))
    }

    pub fn open(&self, sealed: &str) -> Result<String, SealError> {
        let raw = STANDARD.decode(sealed).map_err(|_| SealError)?;
        if raw.len() < NONCE_LEN {
            return Err(SealError);
        }
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError)?;
        let mut data = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut data)
            .map_err(|_| SealError)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_pepper() {
        let a = SecretBox::from_pepper(b"pepper-a").expect("key");
        let sealed = a.seal("whsec_abc").expect("sealed");
        assert!(!sealed.contains("whsec_abc"));
        assert_ne!(
            Some(&sealed),
            a.seal("whsec_abc").ok().as_ref(),
            "fresh nonce each time"
        );
        assert_eq!(a.open(&sealed).ok().as_deref(), Some("whsec_abc"));
        let b = SecretBox::from_pepper(b"pepper-b").expect("key");
        assert!(b.open(&sealed).is_err());
        assert!(a.open("not base64!").is_err());
        assert!(a.open("").is_err());
    }
}
