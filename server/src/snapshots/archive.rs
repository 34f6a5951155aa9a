//! The snapshot file: a tar archive, so any tool lists and unpacks it, whose first entry is
//! `manifest.json`. Written with its SHA-256 computed on the way; unpacked only where its
//! entries are the plain files a snapshot holds (no links, no paths out of the folder).

use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// Name of the manifest entry.
pub const MANIFEST: &str = "manifest.json";

/// Longest manifest read back: it lists files, not data.
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    digest: ring::digest::Context,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.digest.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Lowercase hex of a digest.
fn hex(digest: ring::digest::Digest) -> String {
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a new archive at `path` (synced): `manifest` first, then each `(name in the archive,
/// file on disk)`. Returns its size and SHA-256 (hex).
pub fn write(
    path: &Path,
    manifest: &[u8],
    files: &[(String, PathBuf)],
) -> io::Result<(u64, String)> {
    let file = fs_err::File::create(path)?;
    let hashing = Hashing {
        inner: io::BufWriter::with_capacity(1 << 20, file),
        digest: ring::digest::Context::new(&ring::digest::SHA256),
        bytes: 0,
    };
    let mut builder = tar::Builder::new(hashing);
    builder.mode(tar::HeaderMode::Deterministic);
    let mut header = tar::Header::new_gnu();
    header.set_size(manifest.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append_data(&mut header, MANIFEST, manifest)?;
    for (name, source) in files {
        builder.append_path_with_name(source, name)?;
    }
    let mut hashing = builder.into_inner()?;
    hashing.flush()?;
    let Hashing {
        inner,
        digest,
        bytes,
    } = hashing;
    let file = inner.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    Ok((bytes, hex(digest.finish())))
}

/// SHA-256 (hex) of a whole file.
pub fn sha256(path: &Path) -> io::Result<String> {
    let mut file = fs_err::File::open(path)?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
    }
    Ok(hex(digest.finish()))
}

/// Why an archive was refused: a message for the client (a 400), or an I/O failure here.
#[derive(Debug)]
pub enum Refused {
    /// The file is not a snapshot this server can read; the message says why.
    Invalid(String),
    /// Reading or writing failed on this machine.
    Io(io::Error),
}

impl From<io::Error> for Refused {
    fn from(e: io::Error) -> Self {
        Refused::Io(e)
    }
}

/// Unpacks the archive at `path` into `into` (created), refusing any entry that is not a
/// regular file, or whose path `allowed` rejects (it gets the path's components, each a plain
/// name). Returns the manifest's bytes.
pub fn unpack(
    path: &Path,
    into: &Path,
    allowed: impl Fn(&[&str]) -> bool,
) -> Result<Vec<u8>, Refused> {
    let invalid = |m: String| Refused::Invalid(m);
    fs_err::create_dir_all(into)?;
    let file = fs_err::File::open(path)?;
    let mut archive = tar::Archive::new(io::BufReader::with_capacity(1 << 20, file));
    let mut manifest = None;
    let entries = archive
        .entries()
        .map_err(|e| invalid(format!("not a snapshot archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| invalid(format!("not a snapshot archive: {e}")))?;
        let name = entry
            .path()
            .map_err(|e| invalid(format!("an entry's name does not read: {e}")))?
            .into_owned();
        let mut parts = Vec::new();
        for component in name.components() {
            match component {
                Component::Normal(part) => match part.to_str() {
                    Some(part) => parts.push(part.to_owned()),
                    None => return Err(invalid(format!("entry {name:?} is not UTF-8"))),
                },
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(invalid(format!(
                        "entry {name:?} points outside the snapshot"
                    )))
                }
            }
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        let parts_ref: Vec<&str> = parts.iter().map(String::as_str).collect();
        if !kind.is_file() || !allowed(&parts_ref) {
            return Err(invalid(format!(
                "entry {name:?} is not a file a snapshot holds"
            )));
        }
        if parts_ref == [MANIFEST] {
            if entry.size() > MAX_MANIFEST_BYTES {
                return Err(invalid(format!(
                    "the manifest is {} bytes, above the limit of {MAX_MANIFEST_BYTES}",
                    entry.size()
                )));
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            manifest = Some(bytes);
            continue;
        }
        let target = parts.iter().fold(into.to_path_buf(), |p, c| p.join(c));
        if let Some(parent) = target.parent() {
            fs_err::create_dir_all(parent)?;
        }
        let mut out = fs_err::File::create(&target)?;
        io::copy(&mut entry, &mut out)
            .map_err(|e| invalid(format!("entry {name:?} is cut short: {e}")))?;
        out.sync_all()?;
    }
    manifest.ok_or_else(|| invalid(format!("the archive has no {MANIFEST}")))
}
