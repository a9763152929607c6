//! The host-directory backend never serves a path outside its export: symbolic links
//! pointing out (relative or absolute), `..` chains, names with slashes and forged
//! handles are refused with the RFC 1813 status, through the real NFS program on a real
//! directory.

use std::os::unix::fs::symlink;
use std::sync::Arc;

use rpcrdma_ulp::nfs::server::HostFs;
use rpcrdma_ulp::nfs::v3::args::{MkdirArgs, RenameArgs, SetattrArgs, SymlinkArgs};
use rpcrdma_ulp::nfs::v3::procs;
use rpcrdma_ulp::nfs::v3::res::{
    CreateRes, ReaddirOk, ReaddirRes, ReadlinkRes, RemoveRes, RenameRes, SetattrRes,
};
use rpcrdma_ulp::nfs::v3::types::{DirOpArgs3, Ftype3, NfsFh3, Nfsstat3, Sattr3, Verf};

use crate::nfs_support;
use nfs_support::{decode, Local, TempDir};

/// An export with a secret next to it, and links that try to reach it.
fn fixture() -> (TempDir, Local) {
    let t = TempDir::new("hostfs");
    let export = t.0.join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(t.0.join("secret"), b"outside").unwrap();
    std::fs::write(export.join("inside"), b"inside data").unwrap();
    std::fs::create_dir(export.join("sub")).unwrap();
    symlink("/etc", export.join("etc")).unwrap();
    symlink("../secret", export.join("up")).unwrap();
    symlink("../../../../../..", export.join("sub/deep")).unwrap();
    let l = Local::new(Arc::new(HostFs::new(&export).unwrap()));
    (t, l)
}

fn readlink(l: &mut Local, fh: &[u8]) -> Result<Vec<u8>, Nfsstat3> {
    let r = l.call(procs::READLINK, &NfsFh3(fh));
    decode::<ReadlinkRes>(&r).ok().map(|o| o.data.to_vec())
}

#[test]
fn symlinks_out_are_served_as_links_and_never_followed() {
    let (_t, mut l) = fixture();
    let root = l.root();
    for (name, target) in [(&b"etc"[..], &b"/etc"[..]), (b"up", b"../secret")] {
        let fh = l.lookup(&root, name).unwrap();
        let a = l.getattr(&fh).unwrap();
        assert_eq!(a.ftype, Ftype3::Lnk, "{name:?} is a link, not its target");
        // The client gets the target text and resolves it on its side.
        assert_eq!(readlink(&mut l, &fh).unwrap(), target);
        // Reading, writing or listing through the link is refused.
        assert_eq!(l.read(&fh, 0, 100), Err(Nfsstat3::INVAL));
        assert_eq!(l.write(&fh, 0, b"x"), Err(Nfsstat3::INVAL));
        assert_eq!(l.lookup(&fh, b"passwd"), Err(Nfsstat3::NOTDIR));
        assert_eq!(l.create(&fh, b"new"), Err(Nfsstat3::NOTDIR));
    }
    // Nothing outside changed, nothing was created there.
    let t = _t.0.clone();
    assert_eq!(std::fs::read(t.join("secret")).unwrap(), b"outside");
    assert!(!t.join("new").exists());
    // SETATTR on a link to a file outside must not touch the target.
    let up = l.lookup(&root, b"up").unwrap();
    let r = l.call(
        procs::SETATTR,
        &SetattrArgs {
            object: NfsFh3(&up),
            new_attributes: Sattr3 {
                mode: Some(0o777),
                size: Some(0),
                ..Sattr3::default()
            },
            guard: None,
        },
    );
    assert_ne!(decode::<SetattrRes>(&r).status(), Nfsstat3::OK);
    assert_eq!(std::fs::read(t.join("secret")).unwrap(), b"outside");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(t.join("secret"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o777, 0o777);
}

#[test]
fn dotdot_chains_stay_inside() {
    let (_t, mut l) = fixture();
    let root = l.root();
    let root_id = l.getattr(&root).unwrap().fileid;
    let sub = l.lookup(&root, b"sub").unwrap();
    let mut at = sub.clone();
    for _ in 0..10 {
        at = l.lookup(&at, b"..").unwrap();
        assert_eq!(l.getattr(&at).unwrap().fileid, root_id);
    }
    // Slashes never reach the file system.
    for name in [&b"../secret"[..], b"sub/../../secret", b"/etc/passwd"] {
        assert_eq!(l.lookup(&root, name), Err(Nfsstat3::ACCES), "{name:?}");
        assert_eq!(l.create(&root, name), Err(Nfsstat3::ACCES), "{name:?}");
    }
    // A link to a directory far above is a link; LOOKUP does not enter it.
    let deep = l.lookup(&sub, b"deep").unwrap();
    assert_eq!(l.getattr(&deep).unwrap().ftype, Ftype3::Lnk);
    assert_eq!(l.lookup(&deep, b"etc"), Err(Nfsstat3::NOTDIR));
    // MOUNT paths with .. are refused, as are links.
    assert!(l.mount.resolve(b"/../").is_err());
    assert!(l.mount.resolve(b"/etc").is_err());
    assert!(l.mount.resolve(b"/sub").is_ok());
    // RENAME cannot move an entry out, and "." / ".." cannot be removed or renamed.
    let r = l.call(
        procs::RENAME,
        &RenameArgs {
            from: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"inside",
            },
            to: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"../stolen",
            },
        },
    );
    assert_eq!(decode::<RenameRes>(&r).status(), Nfsstat3::ACCES);
    assert!(!_t.0.join("stolen").exists());
    let r = l.call(
        procs::RMDIR,
        &DirOpArgs3 {
            dir: NfsFh3(&sub),
            name: b"..",
        },
    );
    assert_eq!(decode::<RemoveRes>(&r).status(), Nfsstat3::INVAL);
}

#[test]
fn forged_and_stale_handles() {
    let (t, mut l) = fixture();
    let root = l.root();
    let inside = l.lookup(&root, b"inside").unwrap();
    assert_eq!(l.read(&inside, 0, 100).unwrap().0, b"inside data");
    // A handle for the secret's inode, made up by the client with the right layout
    // but without the key, is not accepted.
    use std::os::unix::fs::MetadataExt;
    let secret_ino = std::fs::metadata(t.0.join("secret")).unwrap().ino();
    let mut forged = inside.clone();
    forged[9..17].copy_from_slice(&secret_ino.to_be_bytes());
    assert_eq!(l.read(&forged, 0, 100), Err(Nfsstat3::BADHANDLE));
    assert_eq!(l.getattr(&forged), Err(Nfsstat3::BADHANDLE));
    // A handle sealed by this server for an inode it never handed out (the secret,
    // outside the export) is stale: the backend cannot place it under the root.
    let sealed = l.shared.handle(rpcrdma_ulp::nfs::server::FileKey {
        id: secret_ino,
        gen: 0,
    });
    assert_eq!(l.read(sealed.as_bytes(), 0, 100), Err(Nfsstat3::STALE));
    // Deleted behind the server's back: stale.
    std::fs::remove_file(t.0.join("export/inside")).unwrap();
    assert_eq!(l.getattr(&inside), Err(Nfsstat3::STALE));
    assert_eq!(l.read(&inside, 0, 1), Err(Nfsstat3::STALE));
    // Replaced by a link to the secret under the same name: still stale, never
    // followed.
    symlink("../secret", t.0.join("export/inside")).unwrap();
    assert_eq!(l.read(&inside, 0, 100), Err(Nfsstat3::STALE));
}

#[test]
fn directory_operations_on_a_real_tree() {
    let (t, mut l) = fixture();
    let root = l.root();
    let r = l.call(
        procs::MKDIR,
        &MkdirArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"d",
            },
            attributes: Sattr3 {
                mode: Some(0o750),
                ..Sattr3::default()
            },
        },
    );
    let d = decode::<CreateRes>(&r)
        .ok()
        .unwrap()
        .obj
        .unwrap()
        .0
        .to_vec();
    assert_eq!(l.getattr(&d).unwrap().mode, 0o750);
    for i in 0..50 {
        let f = l.create(&d, format!("f{i:03}").as_bytes()).unwrap();
        l.write(&f, 0, format!("file {i}").as_bytes()).unwrap();
    }
    assert_eq!(l.create(&d, b"f000"), Err(Nfsstat3::EXIST));
    // An absolute symlink target is stored verbatim, never resolved by the server.
    let r = l.call(
        procs::SYMLINK,
        &SymlinkArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&d),
                name: b"abs",
            },
            attributes: Sattr3::default(),
            target: b"/etc/shadow",
        },
    );
    let s = decode::<CreateRes>(&r)
        .ok()
        .unwrap()
        .obj
        .unwrap()
        .0
        .to_vec();
    assert_eq!(readlink(&mut l, &s).unwrap(), b"/etc/shadow");
    assert_eq!(
        std::fs::read_link(t.0.join("export/d/abs")).unwrap(),
        std::path::Path::new("/etc/shadow")
    );
    // READDIR in pages of 512 octets, cookies continuing, all 51 names once.
    let mut names = Vec::new();
    let (mut cookie, mut verf) = (0u64, Verf::default());
    loop {
        let r = l.call(
            procs::READDIR,
            &rpcrdma_ulp::nfs::v3::args::ReaddirArgs {
                dir: NfsFh3(&d),
                cookie,
                cookieverf: verf,
                count: 512,
            },
        );
        assert!(r.len() <= 512 + 24, "reply within count");
        let ok: ReaddirOk = decode::<ReaddirRes>(&r).ok().unwrap();
        for e in &ok.entries {
            names.push(String::from_utf8(e.name.to_vec()).unwrap());
            cookie = e.cookie;
        }
        verf = ok.cookieverf;
        if ok.eof {
            break;
        }
        assert!(!ok.entries.is_empty());
    }
    assert_eq!(names.len(), 51);
    names.dedup();
    assert_eq!(names.len(), 51);
    // A stale cookie verifier after the directory changed.
    l.create(&d, b"late").unwrap();
    let r = l.call(
        procs::READDIR,
        &rpcrdma_ulp::nfs::v3::args::ReaddirArgs {
            dir: NfsFh3(&d),
            cookie: 3,
            cookieverf: Verf([0xee; 8]),
            count: 4096,
        },
    );
    assert_eq!(decode::<ReaddirRes>(&r).status(), Nfsstat3::BAD_COOKIE);
    // RMDIR of a non-empty directory; REMOVE of a directory.
    let r = l.call(
        procs::RMDIR,
        &DirOpArgs3 {
            dir: NfsFh3(&root),
            name: b"d",
        },
    );
    assert_eq!(decode::<RemoveRes>(&r).status(), Nfsstat3::NOTEMPTY);
    let r = l.call(
        procs::REMOVE,
        &DirOpArgs3 {
            dir: NfsFh3(&root),
            name: b"d",
        },
    );
    assert_eq!(decode::<RemoveRes>(&r).status(), Nfsstat3::ISDIR);
}
