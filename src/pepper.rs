//! The key pepper: the secret every API key's hash is made under, configured or generated
//! once per data folder.

use std::path::Path;

use anyhow::Context;
use rand::RngCore;

use crate::config::{Secret, Settings};

/// The key pepper: configured, or generated once and kept in `<data.dir>/key_pepper`.
pub fn load_pepper(settings: &Settings) -> anyhow::Result<Secret> {
    if !settings.auth.key_pepper.is_empty() {
        return Ok(settings.auth.key_pepper.clone());
    }
    let dir = &settings.data.dir;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data.dir {}", dir.display()))?;
    let path = dir.join("key_pepper");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(Secret::new(existing));
        }
    }
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let pepper = hex::encode(bytes);
    // Written whole under a name of this process's own, then linked into place: instances
    // started together on a new data folder never see a half-written pepper, and the one
    // whose link comes second takes the first one's.
    let draft = dir.join(format!("key_pepper.{}.new", std::process::id()));
    let _ = std::fs::remove_file(&draft);
    write_private(&draft, &pepper)?;
    let linked = std::fs::hard_link(&draft, &path);
    let _ = std::fs::remove_file(&draft);
    match linked {
        Ok(()) => Ok(Secret::new(pepper)),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            let existing = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let existing = existing.trim();
            anyhow::ensure!(
                !existing.is_empty(),
                "{} is empty; remove it (keys made under it stop working) or set auth.key_pepper",
                path.display()
            );
            Ok(Secret::new(existing))
        }
        Err(err) => Err(err).with_context(|| format!("cannot create {}", path.display())),
    }
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// The key pepper's fingerprint, as the database keeps it (not the pepper: an HMAC of a fixed
/// text under it).
pub(crate) fn pepper_fingerprint(pepper: &Secret) -> String {
    use hmac::Mac as _;
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(pepper.expose().as_bytes()) else {
        return String::new();
    };
    mac.update(b"payroll: the key pepper's fingerprint");
    hex::encode(&mac.finalize().into_bytes()[..16])
}
