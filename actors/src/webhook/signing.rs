//! Standard Webhooks 1.0 signatures: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`,
//! the key being the base64-decoded part of a `whsec_…` secret.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The prefix of every secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: `whsec_` + base64 of 32 random bytes.
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The HMAC key of a secret; `None` when it is not `whsec_` + base64.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(secret.strip_prefix(SECRET_PREFIX)?)
        .ok()
        .filter(|k| !k.is_empty())
}

/// One `v1,…` signature.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: one signature per valid key, space-separated.
pub fn signature_header(keys: &[Vec<u8>], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| sign(key, msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_published_standard_webhooks_vector() {
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("valid secret");
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_32_random_bytes() {
        let a = generate_secret();
        assert!(a.starts_with("whsec_"));
        assert_eq!(secret_key(&a).map(|k| k.len()), Some(32));
        assert_ne!(a, generate_secret());
        assert_eq!(secret_key("nope"), None);
        assert_eq!(secret_key("whsec_!!"), None);
    }

    #[test]
    fn several_keys_give_space_separated_signatures() {
        let header = signature_header(&[vec![1; 32], vec![2; 32]], "evt_1", 10, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
    }
}
