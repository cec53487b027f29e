//! Commit signatures: SSH signatures (SSHSIG, ed25519, namespace `git`) in a commit's `gpgsig` header, as git's `gpg.format=ssh` makes and verifies them; the service's key, the keys that verify, and the `allowed_signers` lines. No file I/O here.
use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};
use std::fmt;

/// git's namespace for commit and tag signatures (`ssh-keygen -Y sign -n git`).
pub const NAMESPACE: &str = "git";

/// Why a key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("not an OpenSSH ed25519 private key ({0})")]
    PrivateKey(String),
    #[error("{key:?} is not an OpenSSH public key line (`ssh-ed25519 AAAA... comment`): {reason}")]
    PublicKey { key: String, reason: String },
    #[error("the signing key must be ed25519, not {0}")]
    Algorithm(String),
}

/// The service's signing key: an ed25519 private key.
pub struct Signer {
    key: PrivateKey,
    /// The same key, expanded once: ssh-key's own `sign` derives the public half again from
    /// the seed at every signature, which doubles its cost.
    expanded: ed25519_dalek::SigningKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signer({})", self.fingerprint())
    }
}

impl Signer {
    /// A new key from 32 random bytes, with `comment` (the committer's address, say).
    pub fn from_seed(seed: &[u8; 32], comment: &str) -> Self {
        let pair = ssh_key::private::Ed25519Keypair::from_seed(seed);
        let mut key = PrivateKey::from(pair);
        key.set_comment(comment);
        Self::with_key(key).expect("a key made from a seed has its own public half")
    }

    /// `key` (ed25519) with its expanded form, checked against the public half it carries.
    fn with_key(key: PrivateKey) -> Result<Self, SigningError> {
        let Some(pair) = key.key_data().ed25519() else {
            return Err(SigningError::Algorithm(key.algorithm().to_string()));
        };
        let expanded = ed25519_dalek::SigningKey::from(&pair.private);
        if expanded.verifying_key().as_bytes() != pair.public.as_ref() {
            return Err(SigningError::PrivateKey(
                "its public half is not its private key's".into(),
            ));
        }
        Ok(Self { key, expanded })
    }

    /// The key in an OpenSSH private key file's text (`ssh-keygen -y -f` reads it).
    pub fn from_openssh(text: &str) -> Result<Self, SigningError> {
        if !text.contains("-----BEGIN OPENSSH PRIVATE KEY-----") {
            return Err(SigningError::PrivateKey(if text.trim().is_empty() {
                "the file is empty".into()
            } else {
                "no -----BEGIN OPENSSH PRIVATE KEY----- line".into()
            }));
        }
        let key =
            PrivateKey::from_openssh(text).map_err(|e| SigningError::PrivateKey(e.to_string()))?;
        if key.algorithm() != ssh_key::Algorithm::Ed25519 {
            return Err(SigningError::Algorithm(key.algorithm().to_string()));
        }
        if key.is_encrypted() {
            return Err(SigningError::PrivateKey(
                "it is encrypted; the service needs it without a passphrase".into(),
            ));
        }
        Self::with_key(key)
    }

    /// The text of an OpenSSH private key file (the secret: never log it).
    pub fn to_openssh(&self) -> zeroize::Zeroizing<String> {
        self.key
            .to_openssh(LineEnding::LF)
            .expect("an ed25519 key always encodes")
    }

    /// The public key, as one OpenSSH line.
    pub fn public_key(&self) -> String {
        self.key
            .public_key()
            .to_openssh()
            .expect("an ed25519 key always encodes")
    }

    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        self.key.fingerprint(HashAlg::Sha256).to_string()
    }

    /// `commit` (a commit object's text, without a signature) with its signature in a
    /// `gpgsig` header after the committer line, as `git commit -S` writes it.
    pub fn sign_commit(&self, commit: &str) -> String {
        use ed25519_dalek::Signer as _;
        let sig = SshSig::signed_data(NAMESPACE, HashAlg::Sha512, commit.as_bytes())
            .map(|data| self.expanded.sign(&data).to_bytes().to_vec())
            .and_then(|bytes| ssh_key::Signature::new(ssh_key::Algorithm::Ed25519, bytes))
            .and_then(|signature| {
                let public = self.key.public_key().key_data().clone();
                SshSig::new(public, NAMESPACE, HashAlg::Sha512, signature)
            })
            .and_then(|sig| sig.to_pem(LineEnding::LF))
            .expect("signing with an ed25519 key does not fail");
        with_gpgsig(commit, &sig)
    }
}

/// `commit` with the header `gpgsig <armored signature>` inserted before the blank line
/// that ends the headers; each line after the first starts with a space.
fn with_gpgsig(commit: &str, armored: &str) -> String {
    let end = commit.find("\n\n").map_or(commit.len(), |i| i + 1);
    let mut out = String::with_capacity(commit.len() + armored.len() + 16);
    out.push_str(&commit[..end]);
    out.push_str("gpgsig ");
    out.push_str(&armored.trim_end().replace('\n', "\n "));
    out.push('\n');
    out.push_str(&commit[end..]);
    out
}

/// A commit object's bytes split as git splits them to verify it (`parse_buffer_signed_by_
/// header`): the `gpgsig` headers' text (each continuation line without its leading space,
/// several such headers joined), and the object without them, nor any other `gpgsig*`
/// header (`gpgsig-sha256`). Only the headers are read: a `gpgsig` line in the message is
/// message. `None` when there is no `gpgsig` header.
pub fn split_signed(object: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (mut payload, mut signature) = (Vec::with_capacity(object.len()), Vec::new());
    let (mut in_signature, mut other_signature, mut rest) = (false, false, object);
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let line = &rest[..end];
        rest = &rest[end..];
        if line.first() == Some(&b'\n') {
            // The blank line that ends the headers: the rest is the message, whole.
            payload.extend_from_slice(line);
            payload.extend_from_slice(rest);
            break;
        }
        let sig = if in_signature && line.first() == Some(&b' ') {
            Some(&line[1..])
        } else if let Some(text) = line.strip_prefix(b"gpgsig ") {
            other_signature = false;
            Some(text)
        } else {
            if line.starts_with(b"gpgsig") {
                other_signature = true;
            } else if other_signature && line.first() != Some(&b' ') {
                other_signature = false;
            }
            None
        };
        match sig {
            Some(text) => {
                signature.extend_from_slice(text);
                in_signature = true;
            }
            None => {
                if !other_signature {
                    payload.extend_from_slice(line);
                }
                in_signature = false;
            }
        }
    }
    (!signature.is_empty()).then_some((payload, signature))
}

/// The keys whose signatures count: the current one and the retired ones still listed.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    keys: Vec<PublicKey>,
}

impl Keyring {
    /// The current key first, then each retired one (OpenSSH public key lines).
    pub fn new(current: Option<&Signer>, previous: &[String]) -> Result<Self, SigningError> {
        let mut keys = Vec::with_capacity(previous.len() + 1);
        for line in previous {
            let key =
                PublicKey::from_openssh(line.trim()).map_err(|e| SigningError::PublicKey {
                    key: line.chars().take(40).collect(),
                    reason: e.to_string(),
                })?;
            keys.push(key);
        }
        let ring = Self { keys };
        Ok(match current {
            Some(signer) => ring.with_current(signer),
            None => ring,
        })
    }

    /// These keys, with `signer`'s put first as the current one.
    pub fn with_current(mut self, signer: &Signer) -> Self {
        self.keys.insert(0, signer.key.public_key().clone());
        self
    }

    /// Whether the commit object `object` (its bytes as stored, without the `commit <size>`
    /// header) carries a valid signature by one of these keys over the rest of its bytes,
    /// split as git splits it ([`split_signed`]).
    pub fn verifies_object(&self, object: &[u8]) -> bool {
        match split_signed(object) {
            Some((payload, signature)) => match std::str::from_utf8(&signature) {
                Ok(signature) => self.verifies(&payload, signature),
                Err(_) => false,
            },
            None => false,
        }
    }

    /// Whether `line` (an OpenSSH public key line) is one of these keys.
    pub fn lists(&self, line: &str) -> bool {
        PublicKey::from_openssh(line.trim())
            .is_ok_and(|k| self.keys.iter().any(|have| have.key_data() == k.key_data()))
    }

    /// Checks that a previous key line parses (for the configuration's check).
    pub fn check_public_key(line: &str) -> Result<(), SigningError> {
        Self::new(None, &[line.to_owned()]).map(|_| ())
    }

    /// Whether `signature` (the armored text of a `gpgsig` header) is a valid signature of
    /// `signed` (the commit without that header) by one of these keys, in git's namespace.
    pub fn verifies(&self, signed: &[u8], signature: &str) -> bool {
        let Ok(sig) = SshSig::from_pem(signature.trim()) else {
            return false;
        };
        self.keys
            .iter()
            .any(|key| key.verify(NAMESPACE, signed, &sig).is_ok())
    }

    /// The public keys, current first (OpenSSH lines, without their comments).
    pub fn public_keys(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| {
                let mut k = k.clone();
                k.set_comment("");
                k.to_openssh().expect("a parsed key encodes")
            })
            .collect()
    }

    /// Each key's `SHA256:` fingerprint, current first.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| k.fingerprint(HashAlg::Sha256).to_string())
            .collect()
    }

    /// The lines of a git `allowed_signers` file (`gpg.ssh.allowedSignersFile`) that trust
    /// these keys for `email`'s commits.
    pub fn allowed_signers(&self, email: &str) -> String {
        self.public_keys()
            .iter()
            .map(|k| format!("{email} namespaces=\"{NAMESPACE}\" {k}\n"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A <a@x> 1 +0000\ncommitter planfiles <p@x> 1 +0000\n\nUpdate integrations.yml\n\nRequest-Id: r\n";

    fn signer(byte: u8) -> Signer {
        Signer::from_seed(&[byte; 32], "p@x")
    }

    /// The signed text and the signature, as git reads them back out of a signed commit.
    fn split(signed: &str) -> (String, String) {
        let start = signed.find("gpgsig ").unwrap();
        let end = signed[start..].find("\n\n").unwrap() + start + 1;
        let header = &signed[start..end];
        let sig = header["gpgsig ".len()..].replace("\n ", "\n");
        (format!("{}{}", &signed[..start], &signed[end..]), sig)
    }

    #[test]
    fn a_signed_commit_verifies_with_its_key_only() {
        let s = signer(1);
        let signed = s.sign_commit(COMMIT);
        assert!(signed.contains("\ngpgsig -----BEGIN SSH SIGNATURE-----\n "));
        assert!(signed.ends_with("\n\nUpdate integrations.yml\n\nRequest-Id: r\n"));
        let (data, sig) = split(&signed);
        assert_eq!(data, COMMIT, "the header comes out whole");
        assert!(Keyring::new(Some(&s), &[])
            .unwrap()
            .verifies(data.as_bytes(), &sig));
        let other = signer(2);
        assert!(!Keyring::new(Some(&other), &[])
            .unwrap()
            .verifies(data.as_bytes(), &sig));
        let changed = data.replace("Update", "Upd4te");
        assert!(!Keyring::new(Some(&s), &[])
            .unwrap()
            .verifies(changed.as_bytes(), &sig));
        assert!(!Keyring::new(Some(&s), &[])
            .unwrap()
            .verifies(data.as_bytes(), "junk"));
    }

    #[test]
    fn a_retired_key_still_verifies_and_an_unlisted_one_does_not() {
        let old = signer(1);
        let new = signer(2);
        let (data, sig) = split(&old.sign_commit(COMMIT));
        let ring = Keyring::new(Some(&new), &[old.public_key()]).unwrap();
        assert!(ring.verifies(data.as_bytes(), &sig));
        assert!(!Keyring::new(Some(&new), &[])
            .unwrap()
            .verifies(data.as_bytes(), &sig));
        assert_eq!(ring.public_keys().len(), 2);
        assert!(ring
            .allowed_signers("p@x")
            .starts_with("p@x namespaces=\"git\" ssh-ed25519 "));
    }

    #[test]
    fn keys_round_trip_and_bad_ones_are_refused() {
        let s = signer(3);
        let again = Signer::from_openssh(&s.to_openssh()).unwrap();
        assert_eq!(again.public_key(), s.public_key());
        assert!(s.fingerprint().starts_with("SHA256:"));
        assert!(Signer::from_openssh("not a key").is_err());
        assert!(Keyring::check_public_key(&s.public_key()).is_ok());
        assert!(Keyring::check_public_key("ssh-ed25519 !!!").is_err());
    }

    #[test]
    fn another_namespace_does_not_verify() {
        let s = signer(4);
        let sig = s
            .key
            .sign("file", HashAlg::Sha512, COMMIT.as_bytes())
            .unwrap()
            .to_pem(LineEnding::LF)
            .unwrap();
        assert!(!Keyring::new(Some(&s), &[])
            .unwrap()
            .verifies(COMMIT.as_bytes(), &sig));
    }

    #[test]
    fn the_expanded_key_signs_as_ssh_keys_own_sign_does() {
        // ed25519 is deterministic: the same key and data give the same bytes.
        let s = signer(5);
        let (_, sig) = split(&s.sign_commit(COMMIT));
        let theirs = s
            .key
            .sign(NAMESPACE, HashAlg::Sha512, COMMIT.as_bytes())
            .unwrap()
            .to_pem(LineEnding::LF)
            .unwrap();
        assert_eq!(sig.trim_end(), theirs.trim_end());
    }

    fn pair_of_two_keys() -> ssh_key::private::Ed25519Keypair {
        let mut pair = ssh_key::private::Ed25519Keypair::from_seed(&[6; 32]);
        pair.public = ssh_key::private::Ed25519Keypair::from_seed(&[7; 32]).public;
        pair
    }

    #[test]
    fn a_key_file_whose_public_half_is_another_keys_is_refused() {
        let text = PrivateKey::from(pair_of_two_keys())
            .to_openssh(LineEnding::LF)
            .unwrap();
        // ssh-key's parser checks the pair too; with_key checks again for keys built in code.
        assert!(Signer::from_openssh(&text).is_err());
        let key = PrivateKey::from(pair_of_two_keys());
        let err = Signer::with_key(key).unwrap_err();
        assert!(err.to_string().contains("public half"), "{err}");
    }

    /// A signed commit as git stores it.
    fn signed_object(s: &Signer) -> Vec<u8> {
        s.sign_commit(COMMIT).into_bytes()
    }

    #[test]
    fn a_commit_splits_as_git_splits_it() {
        let s = signer(8);
        let object = signed_object(&s);
        let (payload, sig) = split_signed(&object).unwrap();
        assert_eq!(payload, COMMIT.as_bytes(), "the headers come out whole");
        assert!(String::from_utf8(sig)
            .unwrap()
            .starts_with("-----BEGIN SSH SIGNATURE-----\n"));
        let ring = Keyring::new(Some(&s), &[]).unwrap();
        assert!(ring.verifies_object(&object));
        assert!(split_signed(COMMIT.as_bytes()).is_none(), "unsigned");
        // Another signature header (gpgsig-sha256) is left out of what was signed, as git
        // leaves it out.
        let text = String::from_utf8(object.clone()).unwrap();
        let with_other = text.replacen(
            "\ngpgsig ",
            "\ngpgsig-sha256 -----BEGIN X-----\n junk\n -----END X-----\ngpgsig ",
            1,
        );
        assert!(ring.verifies_object(with_other.as_bytes()));
    }

    #[test]
    fn a_signature_moved_or_bytes_added_do_not_verify() {
        let s = signer(9);
        let ring = Keyring::new(Some(&s), &[]).unwrap();
        let object = String::from_utf8(signed_object(&s)).unwrap();
        let start = object.find("gpgsig ").unwrap();
        let end = object[start..].find("\n\n").unwrap() + start + 1;
        let header = &object[start..end];
        let unsigned = format!("{}{}", &object[..start], &object[end..]);
        // The signature's header moved into the message, at its end and at its start.
        let at_end = format!("{unsigned}{header}");
        assert!(!ring.verifies_object(at_end.as_bytes()));
        let blank = unsigned.find("\n\n").unwrap() + 2;
        let at_start = format!("{}{header}{}", &unsigned[..blank], &unsigned[blank..]);
        assert!(!ring.verifies_object(at_start.as_bytes()));
        // Bytes after a NUL are bytes of the commit.
        let mut nul = object.clone().into_bytes();
        nul.extend_from_slice(b"\0\nhidden bytes\n");
        assert!(!ring.verifies_object(&nul));
        assert!(ring.verifies_object(object.as_bytes()));
    }
}
