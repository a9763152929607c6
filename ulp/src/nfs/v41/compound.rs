//! COMPOUND (RFC 8881 §16.2, §18) arguments and results for the operations an NFSv4.1
//! client needs: EXCHANGE_ID, CREATE_SESSION, SEQUENCE, RECLAIM_COMPLETE, PUTROOTFH,
//! PUTFH, GETFH, LOOKUP, GETATTR, OPEN, READ, WRITE, COMMIT, CLOSE, READDIR, REMOVE,
//! DESTROY_SESSION and DESTROY_CLIENTID. Any other operation number decodes as an error.

use super::{
    sessionid, verifier, Bitmap4, ChangeInfo4, ChannelAttrs4, Fattr4, ImplId, Nfsstat4, SessionId,
    Stateid4, Verifier, FHSIZE, NAME_LIMIT, OPAQUE_LIMIT,
};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};
use crate::nfs::v4::ops;

/// The most operations this crate decodes in one COMPOUND (not an RFC limit).
pub const MAX_OPS: u32 = 64;

/// The most entries this crate decodes in one READDIR reply (not an RFC limit).
pub const MAX_DIR_ENTRIES: usize = 65_536;

/// `state_protect_how4` SP4_NONE: the only state protection this crate speaks.
pub const SP4_NONE: u32 = 0;

/// EXCHANGE_ID flag: the client supports referrals.
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
/// EXCHANGE_ID flag (result): the client id is confirmed.
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// `opentype4` OPEN4_NOCREATE.
pub const OPEN4_NOCREATE: u32 = 0;
/// `opentype4` OPEN4_CREATE.
pub const OPEN4_CREATE: u32 = 1;
/// `createmode4` UNCHECKED4.
pub const UNCHECKED4: u32 = 0;
/// `createmode4` GUARDED4.
pub const GUARDED4: u32 = 1;
/// `createmode4` EXCLUSIVE4.
pub const EXCLUSIVE4: u32 = 2;
/// `createmode4` EXCLUSIVE4_1 (verifier and attributes).
pub const EXCLUSIVE4_1: u32 = 3;
/// `open_claim_type4` CLAIM_NULL.
pub const CLAIM_NULL: u32 = 0;
/// `open_claim_type4` CLAIM_PREVIOUS.
pub const CLAIM_PREVIOUS: u32 = 1;
/// `open_claim_type4` CLAIM_FH (4.1): the current file handle is the file.
pub const CLAIM_FH: u32 = 4;
/// `open_claim_type4` CLAIM_DELEGATE_CUR: an open done locally under a delegation being
/// returned, by name.
pub const CLAIM_DELEGATE_CUR: u32 = 2;
/// `open_claim_type4` CLAIM_DELEG_CUR_FH (4.1): the same, of the current file handle.
pub const CLAIM_DELEG_CUR_FH: u32 = 6;
/// The most stateids this crate decodes in one TEST_STATEID (not an RFC limit).
pub const MAX_TEST_STATEIDS: u32 = 64;
/// The most security flavors this crate decodes in one SECINFO_NO_NAME result.
pub const MAX_SECINFO: u32 = 8;
/// Share access READ.
pub const OPEN4_SHARE_ACCESS_READ: u32 = 1;
/// Share access WRITE.
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 2;
/// Share access BOTH.
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;
/// Share access want flag (4.1): no delegation wanted.
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
/// Share deny NONE.
pub const OPEN4_SHARE_DENY_NONE: u32 = 0;
/// `stable_how4` UNSTABLE4.
pub const UNSTABLE4: u32 = 0;
/// `stable_how4` DATA_SYNC4.
pub const DATA_SYNC4: u32 = 1;
/// `stable_how4` FILE_SYNC4.
pub const FILE_SYNC4: u32 = 2;

/// `open_delegation_type4` values.
const OPEN_DELEGATE_NONE: u32 = 0;
const OPEN_DELEGATE_READ: u32 = 1;
const OPEN_DELEGATE_WRITE: u32 = 2;
const OPEN_DELEGATE_NONE_EXT: u32 = 3;
/// `why_no_delegation4` arms that carry a boolean.
const WND4_CONTENTION: u32 = 7;
const WND4_RESOURCE: u32 = 8;

fn invalid(c: &DdpCursor<'_>, what: &'static str) -> DdpDecodeError {
    DdpDecodeError::Invalid {
        offset: c.position(),
        what,
    }
}

/// EXCHANGE_ID4args with `eia_state_protect` SP4_NONE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdArgs<'d> {
    /// `co_verifier`: changes when the client restarts.
    pub verifier: Verifier,
    /// `co_ownerid`: the client's unique, stable name.
    pub owner: &'d [u8],
    /// `eia_flags`.
    pub flags: u32,
    /// `eia_client_impl_id<1>`.
    pub impl_id: Option<ImplId<'d>>,
}

/// `csa_sec_parms` (`callback_sec_parms4<>`) of AUTH_NONE and AUTH_SYS entries, kept as
/// their XDR (validated when decoded) so that they re-encode exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbSecParms<'d> {
    /// Entries.
    pub count: u32,
    /// Their XDR, after the count.
    pub raw: &'d [u8],
}

impl CbSecParms<'static> {
    /// One AUTH_NONE entry (what this crate's client sends).
    pub const AUTH_NONE: CbSecParms<'static> = CbSecParms {
        count: 1,
        raw: &[0, 0, 0, 0],
    };
}

impl<'d> CbSecParms<'d> {
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let count = c.count(16)?;
        let start = c.position();
        for _ in 0..count {
            match c.u32()? {
                0 => {}
                1 => {
                    // authsys_parms: stamp, machinename<255>, uid, gid, gids<16>.
                    c.u32()?;
                    c.string(255)?;
                    c.u32()?;
                    c.u32()?;
                    for _ in 0..c.count(16)? {
                        c.u32()?;
                    }
                }
                _ => {
                    return Err(invalid(
                        c,
                        "callback security other than AUTH_NONE or AUTH_SYS",
                    ))
                }
            }
        }
        let raw = c.input().get(start..c.position()).unwrap_or(&[]);
        Ok(CbSecParms { count, raw })
    }
}

/// CREATE_SESSION4args with `csa_sec_parms` of AUTH_NONE and AUTH_SYS entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSessionArgs<'d> {
    /// `csa_clientid`.
    pub clientid: u64,
    /// `csa_sequence`: the `eir_sequenceid` of EXCHANGE_ID.
    pub sequence: u32,
    /// `csa_flags` (CREATE_SESSION4_FLAG_*).
    pub flags: u32,
    /// `csa_fore_chan_attrs`.
    pub fore: ChannelAttrs4,
    /// `csa_back_chan_attrs`.
    pub back: ChannelAttrs4,
    /// `csa_cb_program`.
    pub cb_program: u32,
    /// `csa_sec_parms` (Linux nfsd wants at least one entry).
    pub cb_sec: CbSecParms<'d>,
}

/// SEQUENCE4args.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceArgs {
    /// `sa_sessionid`.
    pub sessionid: SessionId,
    /// `sa_sequenceid`.
    pub sequenceid: u32,
    /// `sa_slotid`.
    pub slotid: u32,
    /// `sa_highest_slotid`.
    pub highest_slotid: u32,
    /// `sa_cachethis`.
    pub cachethis: bool,
}

/// `createhow4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow<'d> {
    /// UNCHECKED4: create or open (and apply the attributes).
    Unchecked(Fattr4<'d>),
    /// GUARDED4: fail with NFS4ERR_EXIST if it exists.
    Guarded(Fattr4<'d>),
    /// EXCLUSIVE4 with its verifier.
    Exclusive(Verifier),
    /// EXCLUSIVE4_1 with its verifier and attributes (4.1).
    Exclusive41(Verifier, Fattr4<'d>),
}

/// `open_claim4` arms this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenClaim<'d> {
    /// CLAIM_NULL: this name in the current (directory) file handle.
    Null(&'d [u8]),
    /// CLAIM_FH: the current file handle is the file.
    Fh,
    /// CLAIM_PREVIOUS: reclaim after a server restart, with the delegation type held.
    Previous(u32),
    /// CLAIM_DELEGATE_CUR: the open of this name in the current directory, done locally
    /// under the delegation of this stateid, told to the server (RFC 8881 §10.4.4).
    DelegCur(Stateid4, &'d [u8]),
    /// CLAIM_DELEG_CUR_FH: the same for the current file handle.
    DelegCurFh(Stateid4),
}

/// `openflag4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenHow<'d> {
    /// OPEN4_NOCREATE.
    NoCreate,
    /// OPEN4_CREATE.
    Create(CreateHow<'d>),
}

/// OPEN4args with claim CLAIM_NULL or CLAIM_FH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenArgs<'d> {
    /// `seqid` (0 in 4.1).
    pub seqid: u32,
    /// `share_access` (OPEN4_SHARE_ACCESS_* and want flags).
    pub share_access: u32,
    /// `share_deny`.
    pub share_deny: u32,
    /// `owner.clientid`.
    pub owner_clientid: u64,
    /// `owner.owner`.
    pub owner: &'d [u8],
    /// `openhow`.
    pub how: OpenHow<'d>,
    /// `claim`.
    pub claim: OpenClaim<'d>,
}

/// READ4args.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadArgs {
    /// `stateid`.
    pub stateid: Stateid4,
    /// `offset`.
    pub offset: u64,
    /// `count`.
    pub count: u32,
}

/// WRITE4args; `data` is DDP-eligible (RFC 8267 §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteArgs<'d> {
    /// `stateid`.
    pub stateid: Stateid4,
    /// `offset`.
    pub offset: u64,
    /// `stable` (UNSTABLE4, DATA_SYNC4, FILE_SYNC4).
    pub stable: u32,
    /// `data`.
    pub data: &'d [u8],
}

/// READDIR4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirArgs {
    /// `cookie`.
    pub cookie: u64,
    /// `cookieverf`.
    pub cookieverf: Verifier,
    /// `dircount`.
    pub dircount: u32,
    /// `maxcount`.
    pub maxcount: u32,
    /// `attr_request`.
    pub attr_request: Bitmap4,
}

/// `createtype4` arms of CREATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateType<'d> {
    /// NF4LNK with its target (`linkdata`, DDP-eligible).
    Link(&'d [u8]),
    /// NF4BLK or NF4CHR with `specdata4`.
    Device(u32, u32, u32),
    /// NF4DIR, NF4SOCK or NF4FIFO (the type).
    Plain(u32),
}

/// CREATE4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateArgs<'d> {
    /// `objtype`.
    pub objtype: CreateType<'d>,
    /// `objname`.
    pub name: &'d [u8],
    /// `createattrs`.
    pub attrs: Fattr4<'d>,
}

/// OPEN_DOWNGRADE4args.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenDowngradeArgs {
    /// `open_stateid`.
    pub stateid: Stateid4,
    /// `seqid` (0 in 4.1).
    pub seqid: u32,
    /// `share_access`.
    pub share_access: u32,
    /// `share_deny`.
    pub share_deny: u32,
}

/// One operation of COMPOUND4args (`nfs_argop4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgOp<'d> {
    /// EXCHANGE_ID.
    ExchangeId(ExchangeIdArgs<'d>),
    /// CREATE_SESSION.
    CreateSession(CreateSessionArgs<'d>),
    /// SEQUENCE.
    Sequence(SequenceArgs),
    /// RECLAIM_COMPLETE (`rca_one_fs`).
    ReclaimComplete(bool),
    /// PUTROOTFH.
    PutRootFh,
    /// PUTFH.
    PutFh(&'d [u8]),
    /// GETFH.
    GetFh,
    /// LOOKUP of one component.
    Lookup(&'d [u8]),
    /// GETATTR.
    Getattr(Bitmap4),
    /// OPEN.
    Open(OpenArgs<'d>),
    /// READ.
    Read(ReadArgs),
    /// WRITE.
    Write(WriteArgs<'d>),
    /// COMMIT (`offset`, `count`).
    Commit(u64, u32),
    /// CLOSE (`seqid`, `open_stateid`).
    Close(u32, Stateid4),
    /// READDIR.
    Readdir(ReaddirArgs),
    /// REMOVE of one component.
    Remove(&'d [u8]),
    /// DESTROY_SESSION.
    DestroySession(SessionId),
    /// DESTROY_CLIENTID.
    DestroyClientid(u64),
    /// ACCESS (`access` bits).
    Access(u32),
    /// CREATE (a non-regular file).
    Create(CreateArgs<'d>),
    /// LINK: the saved file handle as `newname` in the current directory.
    Link(&'d [u8]),
    /// LOOKUPP.
    Lookupp,
    /// OPEN_DOWNGRADE.
    OpenDowngrade(OpenDowngradeArgs),
    /// READLINK.
    Readlink,
    /// RENAME (`oldname` in the saved directory, `newname` in the current one).
    Rename(&'d [u8], &'d [u8]),
    /// RESTOREFH.
    RestoreFh,
    /// SAVEFH.
    SaveFh,
    /// SECINFO_NO_NAME (`secinfo_style4`).
    SecinfoNoName(u32),
    /// SETATTR (`stateid`, `obj_attributes`).
    Setattr(Stateid4, Fattr4<'d>),
    /// TEST_STATEID.
    TestStateid(Vec<Stateid4>),
    /// FREE_STATEID.
    FreeStateid(Stateid4),
    /// DELEGRETURN.
    Delegreturn(Stateid4),
}

impl ArgOp<'_> {
    /// The operation number.
    pub fn op(&self) -> u32 {
        match self {
            ArgOp::ExchangeId(_) => ops::EXCHANGE_ID,
            ArgOp::CreateSession(_) => ops::CREATE_SESSION,
            ArgOp::Sequence(_) => ops::SEQUENCE,
            ArgOp::ReclaimComplete(_) => ops::RECLAIM_COMPLETE,
            ArgOp::PutRootFh => ops::PUTROOTFH,
            ArgOp::PutFh(_) => ops::PUTFH,
            ArgOp::GetFh => ops::GETFH,
            ArgOp::Lookup(_) => ops::LOOKUP,
            ArgOp::Getattr(_) => ops::GETATTR,
            ArgOp::Open(_) => ops::OPEN,
            ArgOp::Read(_) => ops::READ,
            ArgOp::Write(_) => ops::WRITE,
            ArgOp::Commit(..) => ops::COMMIT,
            ArgOp::Close(..) => ops::CLOSE,
            ArgOp::Readdir(_) => ops::READDIR,
            ArgOp::Remove(_) => ops::REMOVE,
            ArgOp::DestroySession(_) => ops::DESTROY_SESSION,
            ArgOp::DestroyClientid(_) => ops::DESTROY_CLIENTID,
            ArgOp::Access(_) => ops::ACCESS,
            ArgOp::Create(_) => ops::CREATE,
            ArgOp::Link(_) => ops::LINK,
            ArgOp::Lookupp => ops::LOOKUPP,
            ArgOp::OpenDowngrade(_) => ops::OPEN_DOWNGRADE,
            ArgOp::Readlink => ops::READLINK,
            ArgOp::Rename(..) => ops::RENAME,
            ArgOp::RestoreFh => ops::RESTOREFH,
            ArgOp::SaveFh => ops::SAVEFH,
            ArgOp::SecinfoNoName(_) => ops::SECINFO_NO_NAME,
            ArgOp::Setattr(..) => ops::SETATTR,
            ArgOp::TestStateid(_) => ops::TEST_STATEID,
            ArgOp::FreeStateid(_) => ops::FREE_STATEID,
            ArgOp::Delegreturn(_) => ops::DELEGRETURN,
        }
    }
}

impl<'d> XdrCodec<'d> for ArgOp<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.op())?;
        match self {
            ArgOp::ExchangeId(a) => {
                e.opaque_fixed(&a.verifier)?;
                e.opaque(a.owner)?;
                e.u32(a.flags)?;
                e.u32(SP4_NONE)?;
                match &a.impl_id {
                    Some(id) => {
                        e.u32(1)?;
                        id.encode(e)
                    }
                    None => e.u32(0),
                }
            }
            ArgOp::CreateSession(a) => {
                e.u64(a.clientid)?;
                e.u32(a.sequence)?;
                e.u32(a.flags)?;
                a.fore.encode(e)?;
                a.back.encode(e)?;
                e.u32(a.cb_program)?;
                e.u32(a.cb_sec.count)?;
                e.opaque_fixed(a.cb_sec.raw)
            }
            ArgOp::Sequence(a) => {
                e.opaque_fixed(&a.sessionid)?;
                e.u32(a.sequenceid)?;
                e.u32(a.slotid)?;
                e.u32(a.highest_slotid)?;
                e.bool(a.cachethis)
            }
            ArgOp::ReclaimComplete(one_fs) => e.bool(*one_fs),
            ArgOp::PutRootFh | ArgOp::GetFh => Ok(()),
            ArgOp::PutFh(fh) => e.opaque(fh),
            ArgOp::Lookup(name) | ArgOp::Remove(name) => e.string(name),
            ArgOp::Getattr(b) => b.encode(e),
            ArgOp::Open(a) => {
                e.u32(a.seqid)?;
                e.u32(a.share_access)?;
                e.u32(a.share_deny)?;
                e.u64(a.owner_clientid)?;
                e.opaque(a.owner)?;
                match &a.how {
                    OpenHow::NoCreate => e.u32(OPEN4_NOCREATE)?,
                    OpenHow::Create(how) => {
                        e.u32(OPEN4_CREATE)?;
                        match how {
                            CreateHow::Unchecked(f) => {
                                e.u32(UNCHECKED4)?;
                                f.encode(e)?;
                            }
                            CreateHow::Guarded(f) => {
                                e.u32(GUARDED4)?;
                                f.encode(e)?;
                            }
                            CreateHow::Exclusive(v) => {
                                e.u32(EXCLUSIVE4)?;
                                e.opaque_fixed(v)?;
                            }
                            CreateHow::Exclusive41(v, f) => {
                                e.u32(EXCLUSIVE4_1)?;
                                e.opaque_fixed(v)?;
                                f.encode(e)?;
                            }
                        }
                    }
                }
                match a.claim {
                    OpenClaim::Null(name) => {
                        e.u32(CLAIM_NULL)?;
                        e.string(name)
                    }
                    OpenClaim::Fh => e.u32(CLAIM_FH),
                    OpenClaim::Previous(t) => {
                        e.u32(CLAIM_PREVIOUS)?;
                        e.u32(t)
                    }
                    OpenClaim::DelegCur(s, name) => {
                        e.u32(CLAIM_DELEGATE_CUR)?;
                        s.encode(e)?;
                        e.string(name)
                    }
                    OpenClaim::DelegCurFh(s) => {
                        e.u32(CLAIM_DELEG_CUR_FH)?;
                        s.encode(e)
                    }
                }
            }
            ArgOp::Read(a) => {
                a.stateid.encode(e)?;
                e.u64(a.offset)?;
                e.u32(a.count)
            }
            ArgOp::Write(a) => {
                a.stateid.encode(e)?;
                e.u64(a.offset)?;
                e.u32(a.stable)?;
                e.opaque_ddp(a.data)
            }
            ArgOp::Commit(offset, count) => {
                e.u64(*offset)?;
                e.u32(*count)
            }
            ArgOp::Close(seqid, stateid) => {
                e.u32(*seqid)?;
                stateid.encode(e)
            }
            ArgOp::Readdir(a) => {
                e.u64(a.cookie)?;
                e.opaque_fixed(&a.cookieverf)?;
                e.u32(a.dircount)?;
                e.u32(a.maxcount)?;
                a.attr_request.encode(e)
            }
            ArgOp::DestroySession(s) => e.opaque_fixed(s),
            ArgOp::DestroyClientid(id) => e.u64(*id),
            ArgOp::Access(a) | ArgOp::SecinfoNoName(a) => e.u32(*a),
            ArgOp::Create(a) => {
                match a.objtype {
                    CreateType::Link(target) => {
                        e.u32(super::ftype::NF4LNK)?;
                        e.string_ddp(target)?;
                    }
                    CreateType::Device(t, major, minor) => {
                        e.u32(t)?;
                        e.u32(major)?;
                        e.u32(minor)?;
                    }
                    CreateType::Plain(t) => e.u32(t)?,
                }
                e.string(a.name)?;
                a.attrs.encode(e)
            }
            ArgOp::Link(name) => e.string(name),
            ArgOp::Lookupp | ArgOp::Readlink | ArgOp::RestoreFh | ArgOp::SaveFh => Ok(()),
            ArgOp::OpenDowngrade(a) => {
                a.stateid.encode(e)?;
                e.u32(a.seqid)?;
                e.u32(a.share_access)?;
                e.u32(a.share_deny)
            }
            ArgOp::Rename(from, to) => {
                e.string(from)?;
                e.string(to)
            }
            ArgOp::Setattr(s, f) => {
                s.encode(e)?;
                f.encode(e)
            }
            ArgOp::TestStateid(ids) => {
                e.u32(ids.len() as u32)?;
                ids.iter().try_for_each(|s| s.encode(e))
            }
            ArgOp::FreeStateid(s) | ArgOp::Delegreturn(s) => s.encode(e),
        }
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let op = c.u32()?;
        Ok(match op {
            ops::EXCHANGE_ID => {
                let verifier = verifier(c)?;
                let owner = c.opaque(OPAQUE_LIMIT)?;
                let flags = c.u32()?;
                if c.u32()? != SP4_NONE {
                    return Err(invalid(c, "state protection other than SP4_NONE"));
                }
                let impl_id = match c.count(1)? {
                    1 => Some(ImplId::decode(c)?),
                    _ => None,
                };
                ArgOp::ExchangeId(ExchangeIdArgs {
                    verifier,
                    owner,
                    flags,
                    impl_id,
                })
            }
            ops::CREATE_SESSION => {
                let clientid = c.u64()?;
                let sequence = c.u32()?;
                let flags = c.u32()?;
                let fore = ChannelAttrs4::decode(c)?;
                let back = ChannelAttrs4::decode(c)?;
                let cb_program = c.u32()?;
                let cb_sec = CbSecParms::decode(c)?;
                ArgOp::CreateSession(CreateSessionArgs {
                    clientid,
                    sequence,
                    flags,
                    fore,
                    back,
                    cb_program,
                    cb_sec,
                })
            }
            ops::SEQUENCE => ArgOp::Sequence(SequenceArgs {
                sessionid: sessionid(c)?,
                sequenceid: c.u32()?,
                slotid: c.u32()?,
                highest_slotid: c.u32()?,
                cachethis: c.bool()?,
            }),
            ops::RECLAIM_COMPLETE => ArgOp::ReclaimComplete(c.bool()?),
            ops::PUTROOTFH => ArgOp::PutRootFh,
            ops::PUTFH => ArgOp::PutFh(c.opaque(FHSIZE)?),
            ops::GETFH => ArgOp::GetFh,
            ops::LOOKUP => ArgOp::Lookup(c.string(NAME_LIMIT)?),
            ops::GETATTR => ArgOp::Getattr(Bitmap4::decode(c)?),
            ops::OPEN => {
                let seqid = c.u32()?;
                let share_access = c.u32()?;
                let share_deny = c.u32()?;
                let owner_clientid = c.u64()?;
                let owner = c.opaque(OPAQUE_LIMIT)?;
                let how = match c.u32()? {
                    OPEN4_NOCREATE => OpenHow::NoCreate,
                    OPEN4_CREATE => OpenHow::Create(match c.u32()? {
                        UNCHECKED4 => CreateHow::Unchecked(Fattr4::decode(c)?),
                        GUARDED4 => CreateHow::Guarded(Fattr4::decode(c)?),
                        EXCLUSIVE4 => CreateHow::Exclusive(verifier(c)?),
                        EXCLUSIVE4_1 => CreateHow::Exclusive41(verifier(c)?, Fattr4::decode(c)?),
                        _ => return Err(invalid(c, "createmode4 out of range")),
                    }),
                    _ => return Err(invalid(c, "opentype4 out of range")),
                };
                let claim = match c.u32()? {
                    CLAIM_NULL => OpenClaim::Null(c.string(NAME_LIMIT)?),
                    CLAIM_FH => OpenClaim::Fh,
                    CLAIM_PREVIOUS => OpenClaim::Previous(c.u32()?),
                    CLAIM_DELEGATE_CUR => {
                        OpenClaim::DelegCur(Stateid4::decode(c)?, c.string(NAME_LIMIT)?)
                    }
                    CLAIM_DELEG_CUR_FH => OpenClaim::DelegCurFh(Stateid4::decode(c)?),
                    _ => return Err(invalid(c, "open claim this crate does not decode")),
                };
                ArgOp::Open(OpenArgs {
                    seqid,
                    share_access,
                    share_deny,
                    owner_clientid,
                    owner,
                    how,
                    claim,
                })
            }
            ops::READ => ArgOp::Read(ReadArgs {
                stateid: Stateid4::decode(c)?,
                offset: c.u64()?,
                count: c.u32()?,
            }),
            ops::WRITE => ArgOp::Write(WriteArgs {
                stateid: Stateid4::decode(c)?,
                offset: c.u64()?,
                stable: c.u32()?,
                data: c.opaque_ddp(u32::MAX)?,
            }),
            ops::COMMIT => ArgOp::Commit(c.u64()?, c.u32()?),
            ops::CLOSE => ArgOp::Close(c.u32()?, Stateid4::decode(c)?),
            ops::READDIR => ArgOp::Readdir(ReaddirArgs {
                cookie: c.u64()?,
                cookieverf: verifier(c)?,
                dircount: c.u32()?,
                maxcount: c.u32()?,
                attr_request: Bitmap4::decode(c)?,
            }),
            ops::REMOVE => ArgOp::Remove(c.string(NAME_LIMIT)?),
            ops::DESTROY_SESSION => ArgOp::DestroySession(sessionid(c)?),
            ops::DESTROY_CLIENTID => ArgOp::DestroyClientid(c.u64()?),
            ops::ACCESS => ArgOp::Access(c.u32()?),
            ops::CREATE => {
                let objtype = match c.u32()? {
                    super::ftype::NF4LNK => CreateType::Link(c.string_ddp(NAME_LIMIT)?),
                    t @ (super::ftype::NF4BLK | super::ftype::NF4CHR) => {
                        CreateType::Device(t, c.u32()?, c.u32()?)
                    }
                    t @ (super::ftype::NF4DIR | super::ftype::NF4SOCK | super::ftype::NF4FIFO) => {
                        CreateType::Plain(t)
                    }
                    _ => return Err(invalid(c, "createtype4 out of range")),
                };
                ArgOp::Create(CreateArgs {
                    objtype,
                    name: c.string(NAME_LIMIT)?,
                    attrs: Fattr4::decode(c)?,
                })
            }
            ops::LINK => ArgOp::Link(c.string(NAME_LIMIT)?),
            ops::LOOKUPP => ArgOp::Lookupp,
            ops::OPEN_DOWNGRADE => ArgOp::OpenDowngrade(OpenDowngradeArgs {
                stateid: Stateid4::decode(c)?,
                seqid: c.u32()?,
                share_access: c.u32()?,
                share_deny: c.u32()?,
            }),
            ops::READLINK => ArgOp::Readlink,
            ops::RENAME => ArgOp::Rename(c.string(NAME_LIMIT)?, c.string(NAME_LIMIT)?),
            ops::RESTOREFH => ArgOp::RestoreFh,
            ops::SAVEFH => ArgOp::SaveFh,
            ops::SECINFO_NO_NAME => ArgOp::SecinfoNoName(c.u32()?),
            ops::SETATTR => ArgOp::Setattr(Stateid4::decode(c)?, Fattr4::decode(c)?),
            ops::TEST_STATEID => {
                let n = c.count(MAX_TEST_STATEIDS)?;
                let mut ids = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    ids.push(Stateid4::decode(c)?);
                }
                ArgOp::TestStateid(ids)
            }
            ops::FREE_STATEID => ArgOp::FreeStateid(Stateid4::decode(c)?),
            ops::DELEGRETURN => ArgOp::Delegreturn(Stateid4::decode(c)?),
            _ => return Err(invalid(c, "operation not supported by this codec")),
        })
    }
}

/// COMPOUND4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundArgs<'d> {
    /// `tag`.
    pub tag: &'d [u8],
    /// `minorversion`.
    pub minorversion: u32,
    /// `argarray`.
    pub ops: Vec<ArgOp<'d>>,
}

impl<'d> XdrCodec<'d> for CompoundArgs<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.string(self.tag)?;
        e.u32(self.minorversion)?;
        e.u32(self.ops.len() as u32)?;
        for op in &self.ops {
            op.encode(e)?;
        }
        Ok(())
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let tag = c.string(NAME_LIMIT)?;
        let minorversion = c.u32()?;
        let n = c.count(MAX_OPS)?;
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(ArgOp::decode(c)?);
        }
        Ok(CompoundArgs {
            tag,
            minorversion,
            ops: v,
        })
    }
}

/// EXCHANGE_ID4resok with `eir_state_protect` SP4_NONE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdRes<'d> {
    /// `eir_clientid`.
    pub clientid: u64,
    /// `eir_sequenceid`.
    pub sequenceid: u32,
    /// `eir_flags`.
    pub flags: u32,
    /// `eir_server_owner.so_minor_id`.
    pub server_minor_id: u64,
    /// `eir_server_owner.so_major_id`.
    pub server_major_id: &'d [u8],
    /// `eir_server_scope`.
    pub server_scope: &'d [u8],
    /// `eir_server_impl_id<1>`.
    pub impl_id: Option<ImplId<'d>>,
}

/// CREATE_SESSION4resok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSessionRes {
    /// `csr_sessionid`.
    pub sessionid: SessionId,
    /// `csr_sequence`.
    pub sequence: u32,
    /// `csr_flags`.
    pub flags: u32,
    /// `csr_fore_chan_attrs`.
    pub fore: ChannelAttrs4,
    /// `csr_back_chan_attrs`.
    pub back: ChannelAttrs4,
}

/// SEQUENCE4resok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceRes {
    /// `sr_sessionid`.
    pub sessionid: SessionId,
    /// `sr_sequenceid`.
    pub sequenceid: u32,
    /// `sr_slotid`.
    pub slotid: u32,
    /// `sr_highest_slotid`.
    pub highest_slotid: u32,
    /// `sr_target_highest_slotid`.
    pub target_highest_slotid: u32,
    /// `sr_status_flags` (SEQ4_STATUS_*).
    pub status_flags: u32,
}

/// `nfsace4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nfsace4<'d> {
    /// `type`.
    pub acetype: u32,
    /// `flag`.
    pub flag: u32,
    /// `access_mask`.
    pub access_mask: u32,
    /// `who`.
    pub who: &'d [u8],
}

impl Nfsace4<'_> {
    /// Encodes into an encoder of any lifetime (nothing is DDP-eligible here).
    pub fn encode_any(&self, e: &mut DdpEncoder<'_, '_>) -> Result<(), DdpEncodeError> {
        e.u32(self.acetype)?;
        e.u32(self.flag)?;
        e.u32(self.access_mask)?;
        e.string(self.who)
    }
}

impl<'d> XdrCodec<'d> for Nfsace4<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.encode_any(e)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Nfsace4 {
            acetype: c.u32()?,
            flag: c.u32()?,
            access_mask: c.u32()?,
            who: c.string(NAME_LIMIT)?,
        })
    }
}

/// `nfs_space_limit4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceLimit {
    /// NFS_LIMIT_SIZE.
    Size(u64),
    /// NFS_LIMIT_BLOCKS (`num_blocks`, `bytes_per_block`).
    Blocks(u32, u32),
}

/// `open_delegation4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation<'d> {
    /// OPEN_DELEGATE_NONE.
    None,
    /// OPEN_DELEGATE_READ (`stateid`, `recall`, `permissions`).
    Read(Stateid4, bool, Nfsace4<'d>),
    /// OPEN_DELEGATE_WRITE (`stateid`, `recall`, `space_limit`, `permissions`).
    Write(Stateid4, bool, SpaceLimit, Nfsace4<'d>),
    /// OPEN_DELEGATE_NONE_EXT (`ond_why`, and the boolean of WND4_CONTENTION and
    /// WND4_RESOURCE).
    NoneExt(u32, Option<bool>),
}

impl OpenDelegation<'_> {
    /// Encodes into an encoder of any lifetime (nothing is DDP-eligible here).
    pub fn encode_any(&self, e: &mut DdpEncoder<'_, '_>) -> Result<(), DdpEncodeError> {
        match self {
            OpenDelegation::None => e.u32(OPEN_DELEGATE_NONE),
            OpenDelegation::Read(s, recall, ace) => {
                e.u32(OPEN_DELEGATE_READ)?;
                s.encode(e)?;
                e.bool(*recall)?;
                ace.encode_any(e)
            }
            OpenDelegation::Write(s, recall, limit, ace) => {
                e.u32(OPEN_DELEGATE_WRITE)?;
                s.encode(e)?;
                e.bool(*recall)?;
                match limit {
                    SpaceLimit::Size(n) => {
                        e.u32(1)?;
                        e.u64(*n)?;
                    }
                    SpaceLimit::Blocks(n, b) => {
                        e.u32(2)?;
                        e.u32(*n)?;
                        e.u32(*b)?;
                    }
                }
                ace.encode_any(e)
            }
            OpenDelegation::NoneExt(why, b) => {
                e.u32(OPEN_DELEGATE_NONE_EXT)?;
                e.u32(*why)?;
                match b {
                    Some(b) => e.bool(*b),
                    None => Ok(()),
                }
            }
        }
    }
}

impl<'d> XdrCodec<'d> for OpenDelegation<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.encode_any(e)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(match c.u32()? {
            OPEN_DELEGATE_NONE => OpenDelegation::None,
            OPEN_DELEGATE_READ => {
                OpenDelegation::Read(Stateid4::decode(c)?, c.bool()?, Nfsace4::decode(c)?)
            }
            OPEN_DELEGATE_WRITE => {
                let s = Stateid4::decode(c)?;
                let recall = c.bool()?;
                let limit = match c.u32()? {
                    1 => SpaceLimit::Size(c.u64()?),
                    2 => SpaceLimit::Blocks(c.u32()?, c.u32()?),
                    _ => return Err(invalid(c, "limitby4 out of range")),
                };
                OpenDelegation::Write(s, recall, limit, Nfsace4::decode(c)?)
            }
            OPEN_DELEGATE_NONE_EXT => {
                let why = c.u32()?;
                let b = match why {
                    WND4_CONTENTION | WND4_RESOURCE => Some(c.bool()?),
                    _ => None,
                };
                OpenDelegation::NoneExt(why, b)
            }
            _ => return Err(invalid(c, "open_delegation_type4 out of range")),
        })
    }
}

/// OPEN4resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRes<'d> {
    /// `stateid`.
    pub stateid: Stateid4,
    /// `cinfo`.
    pub cinfo: ChangeInfo4,
    /// `rflags`.
    pub rflags: u32,
    /// `attrset`.
    pub attrset: Bitmap4,
    /// `delegation`.
    pub delegation: OpenDelegation<'d>,
}

/// One `entry4` of READDIR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry<'d> {
    /// `cookie`.
    pub cookie: u64,
    /// `name`.
    pub name: &'d [u8],
    /// `attrs`.
    pub attrs: Fattr4<'d>,
}

/// READDIR4resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirRes<'d> {
    /// `cookieverf`.
    pub cookieverf: Verifier,
    /// `reply.entries`.
    pub entries: Vec<DirEntry<'d>>,
    /// `reply.eof`.
    pub eof: bool,
}

/// The body of a successful result (`nfs_resop4` arms past the status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResBody<'d> {
    /// No body: a failed operation, or one whose result is the status alone.
    None,
    /// EXCHANGE_ID.
    ExchangeId(ExchangeIdRes<'d>),
    /// CREATE_SESSION.
    CreateSession(CreateSessionRes),
    /// SEQUENCE.
    Sequence(SequenceRes),
    /// GETFH: the handle.
    GetFh(&'d [u8]),
    /// GETATTR.
    Getattr(Fattr4<'d>),
    /// OPEN.
    Open(OpenRes<'d>),
    /// READ (`eof`, `data`; the data is DDP-eligible).
    Read(bool, &'d [u8]),
    /// WRITE (`count`, `committed`, `writeverf`).
    Write(u32, u32, Verifier),
    /// COMMIT (`writeverf`).
    Commit(Verifier),
    /// CLOSE (`open_stateid`).
    Close(Stateid4),
    /// READDIR.
    Readdir(ReaddirRes<'d>),
    /// REMOVE (`cinfo`).
    Remove(ChangeInfo4),
    /// ACCESS (`supported`, `access`).
    Access(u32, u32),
    /// CREATE (`cinfo`, `attrset`).
    Create(ChangeInfo4, Bitmap4),
    /// LINK (`cinfo`).
    Link(ChangeInfo4),
    /// OPEN_DOWNGRADE (`open_stateid`).
    OpenDowngrade(Stateid4),
    /// READLINK (`link`; DDP-eligible).
    Readlink(&'d [u8]),
    /// RENAME (`source_cinfo`, `target_cinfo`).
    Rename(ChangeInfo4, ChangeInfo4),
    /// SECINFO_NO_NAME: the flavors (AUTH_NONE, AUTH_SYS; no RPCSEC_GSS info).
    SecinfoNoName(Vec<u32>),
    /// SETATTR (`attrsset`); a failed SETATTR carries one too, encoded empty.
    Setattr(Bitmap4),
    /// TEST_STATEID (`tsr_status_codes`).
    TestStateid(Vec<Nfsstat4>),
}

/// One result of COMPOUND4res (`nfs_resop4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResOp<'d> {
    /// The operation number.
    pub op: u32,
    /// Its status.
    pub status: Nfsstat4,
    /// The rest, for NFS4_OK.
    pub body: ResBody<'d>,
}

impl ResOp<'_> {
    /// Encodes a result whose body is not borrowed for the encoder's lifetime: every arm
    /// but READ and READLINK data, which [`XdrCodec::encode`] places in Write chunks
    /// (here they would go inline). A server encodes short-lived results this way.
    pub fn encode_plain(&self, e: &mut DdpEncoder<'_, '_>) -> Result<(), DdpEncodeError> {
        e.u32(self.op)?;
        e.u32(self.status.0)?;
        match &self.body {
            ResBody::None => {
                if matches!(self.op, ops::READ | ops::READLINK) {
                    e.skip_ddp();
                }
                if self.op == ops::SETATTR {
                    // SETATTR4res carries `attrsset` whatever the status.
                    e.u32(0)?;
                }
                Ok(())
            }
            ResBody::Read(eof, data) => {
                e.bool(*eof)?;
                e.opaque(data)?;
                e.skip_ddp();
                Ok(())
            }
            ResBody::Readlink(data) => {
                e.opaque(data)?;
                e.skip_ddp();
                Ok(())
            }
            ResBody::ExchangeId(r) => {
                e.u64(r.clientid)?;
                e.u32(r.sequenceid)?;
                e.u32(r.flags)?;
                e.u32(SP4_NONE)?;
                e.u64(r.server_minor_id)?;
                e.opaque(r.server_major_id)?;
                e.opaque(r.server_scope)?;
                match &r.impl_id {
                    Some(id) => {
                        e.u32(1)?;
                        id.encode_any(e)
                    }
                    None => e.u32(0),
                }
            }
            ResBody::CreateSession(r) => {
                e.opaque_fixed(&r.sessionid)?;
                e.u32(r.sequence)?;
                e.u32(r.flags)?;
                r.fore.encode(e)?;
                r.back.encode(e)
            }
            ResBody::Sequence(r) => {
                e.opaque_fixed(&r.sessionid)?;
                for v in [
                    r.sequenceid,
                    r.slotid,
                    r.highest_slotid,
                    r.target_highest_slotid,
                    r.status_flags,
                ] {
                    e.u32(v)?;
                }
                Ok(())
            }
            ResBody::GetFh(fh) => e.opaque(fh),
            ResBody::Getattr(f) => f.encode_any(e),
            ResBody::Open(r) => {
                r.stateid.encode(e)?;
                r.cinfo.encode(e)?;
                e.u32(r.rflags)?;
                r.attrset.encode(e)?;
                r.delegation.encode_any(e)
            }
            ResBody::Write(count, committed, verf) => {
                e.u32(*count)?;
                e.u32(*committed)?;
                e.opaque_fixed(verf)
            }
            ResBody::Commit(verf) => e.opaque_fixed(verf),
            ResBody::Close(s) => s.encode(e),
            ResBody::Readdir(r) => {
                e.opaque_fixed(&r.cookieverf)?;
                for d in &r.entries {
                    e.optional(true)?;
                    e.u64(d.cookie)?;
                    e.string(d.name)?;
                    d.attrs.encode_any(e)?;
                }
                e.optional(false)?;
                e.bool(r.eof)
            }
            ResBody::Remove(ci) | ResBody::Link(ci) => ci.encode(e),
            ResBody::Access(supported, access) => {
                e.u32(*supported)?;
                e.u32(*access)
            }
            ResBody::Create(ci, set) => {
                ci.encode(e)?;
                set.encode(e)
            }
            ResBody::OpenDowngrade(s) => s.encode(e),
            ResBody::Rename(a, b) => {
                a.encode(e)?;
                b.encode(e)
            }
            ResBody::SecinfoNoName(flavors) => {
                e.u32(flavors.len() as u32)?;
                flavors.iter().try_for_each(|&f| e.u32(f))
            }
            ResBody::Setattr(set) => set.encode(e),
            ResBody::TestStateid(codes) => {
                e.u32(codes.len() as u32)?;
                codes.iter().try_for_each(|s| e.u32(s.0))
            }
        }
    }
}

impl<'d> XdrCodec<'d> for ResOp<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match &self.body {
            ResBody::Read(eof, data) if self.status.is_ok() => {
                e.u32(self.op)?;
                e.u32(self.status.0)?;
                e.bool(*eof)?;
                e.opaque_ddp(data)
            }
            ResBody::Readlink(data) if self.status.is_ok() => {
                e.u32(self.op)?;
                e.u32(self.status.0)?;
                e.string_ddp(data)
            }
            _ => self.encode_plain(e),
        }
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let op = c.u32()?;
        let status = Nfsstat4(c.u32()?);
        if !status.is_ok() {
            if matches!(op, ops::READ | ops::READLINK) {
                c.skip_ddp()?;
            }
            if op == ops::SETATTR {
                // `attrsset` is there whatever the status; only an empty one is canonical
                // here (the body is not kept).
                if Bitmap4::decode(c)? != Bitmap4::default() {
                    return Err(invalid(c, "failed SETATTR with attributes set"));
                }
            }
            return Ok(ResOp {
                op,
                status,
                body: ResBody::None,
            });
        }
        let known = matches!(
            op,
            ops::EXCHANGE_ID
                | ops::CREATE_SESSION
                | ops::SEQUENCE
                | ops::RECLAIM_COMPLETE
                | ops::PUTROOTFH
                | ops::PUTFH
                | ops::GETFH
                | ops::LOOKUP
                | ops::GETATTR
                | ops::OPEN
                | ops::READ
                | ops::WRITE
                | ops::COMMIT
                | ops::CLOSE
                | ops::READDIR
                | ops::REMOVE
                | ops::DESTROY_SESSION
                | ops::DESTROY_CLIENTID
                | ops::ILLEGAL
                | ops::ACCESS
                | ops::CREATE
                | ops::LINK
                | ops::LOOKUPP
                | ops::OPEN_DOWNGRADE
                | ops::READLINK
                | ops::RENAME
                | ops::RESTOREFH
                | ops::SAVEFH
                | ops::SECINFO_NO_NAME
                | ops::SETATTR
                | ops::TEST_STATEID
                | ops::FREE_STATEID
                | ops::DELEGRETURN
                | ops::BIND_CONN_TO_SESSION
        );
        if !known {
            return Err(invalid(
                c,
                "result of an operation this codec does not know",
            ));
        }
        let body = match op {
            ops::EXCHANGE_ID => {
                let clientid = c.u64()?;
                let sequenceid = c.u32()?;
                let flags = c.u32()?;
                if c.u32()? != SP4_NONE {
                    return Err(invalid(c, "state protection other than SP4_NONE"));
                }
                ResBody::ExchangeId(ExchangeIdRes {
                    clientid,
                    sequenceid,
                    flags,
                    server_minor_id: c.u64()?,
                    server_major_id: c.opaque(OPAQUE_LIMIT)?,
                    server_scope: c.opaque(OPAQUE_LIMIT)?,
                    impl_id: match c.count(1)? {
                        1 => Some(ImplId::decode(c)?),
                        _ => None,
                    },
                })
            }
            ops::CREATE_SESSION => ResBody::CreateSession(CreateSessionRes {
                sessionid: sessionid(c)?,
                sequence: c.u32()?,
                flags: c.u32()?,
                fore: ChannelAttrs4::decode(c)?,
                back: ChannelAttrs4::decode(c)?,
            }),
            ops::SEQUENCE => ResBody::Sequence(SequenceRes {
                sessionid: sessionid(c)?,
                sequenceid: c.u32()?,
                slotid: c.u32()?,
                highest_slotid: c.u32()?,
                target_highest_slotid: c.u32()?,
                status_flags: c.u32()?,
            }),
            ops::GETFH => ResBody::GetFh(c.opaque(FHSIZE)?),
            ops::GETATTR => ResBody::Getattr(Fattr4::decode(c)?),
            ops::OPEN => ResBody::Open(OpenRes {
                stateid: Stateid4::decode(c)?,
                cinfo: ChangeInfo4::decode(c)?,
                rflags: c.u32()?,
                attrset: Bitmap4::decode(c)?,
                delegation: OpenDelegation::decode(c)?,
            }),
            ops::READ => {
                let eof = c.bool()?;
                ResBody::Read(eof, c.opaque_ddp(u32::MAX)?)
            }
            ops::WRITE => ResBody::Write(c.u32()?, c.u32()?, verifier(c)?),
            ops::COMMIT => ResBody::Commit(verifier(c)?),
            ops::CLOSE => ResBody::Close(Stateid4::decode(c)?),
            ops::READDIR => {
                let cookieverf = verifier(c)?;
                let mut entries = Vec::new();
                while c.optional()? {
                    if entries.len() == MAX_DIR_ENTRIES {
                        return Err(invalid(c, "more READDIR entries than this client takes"));
                    }
                    entries.push(DirEntry {
                        cookie: c.u64()?,
                        name: c.string(NAME_LIMIT)?,
                        attrs: Fattr4::decode(c)?,
                    });
                }
                ResBody::Readdir(ReaddirRes {
                    cookieverf,
                    entries,
                    eof: c.bool()?,
                })
            }
            ops::REMOVE => ResBody::Remove(ChangeInfo4::decode(c)?),
            ops::ACCESS => ResBody::Access(c.u32()?, c.u32()?),
            ops::CREATE => ResBody::Create(ChangeInfo4::decode(c)?, Bitmap4::decode(c)?),
            ops::LINK => ResBody::Link(ChangeInfo4::decode(c)?),
            ops::OPEN_DOWNGRADE => ResBody::OpenDowngrade(Stateid4::decode(c)?),
            ops::READLINK => ResBody::Readlink(c.string_ddp(NAME_LIMIT)?),
            ops::RENAME => ResBody::Rename(ChangeInfo4::decode(c)?, ChangeInfo4::decode(c)?),
            ops::SECINFO_NO_NAME => {
                let n = c.count(MAX_SECINFO)?;
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let flavor = c.u32()?;
                    if flavor == 6 {
                        return Err(invalid(c, "RPCSEC_GSS secinfo is not decoded"));
                    }
                    v.push(flavor);
                }
                ResBody::SecinfoNoName(v)
            }
            ops::SETATTR => ResBody::Setattr(Bitmap4::decode(c)?),
            ops::TEST_STATEID => {
                let n = c.count(MAX_TEST_STATEIDS)?;
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(Nfsstat4(c.u32()?));
                }
                ResBody::TestStateid(v)
            }
            _ => ResBody::None,
        };
        Ok(ResOp { op, status, body })
    }
}

/// COMPOUND4res.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundRes<'d> {
    /// `status`: that of the last operation evaluated.
    pub status: Nfsstat4,
    /// `tag`.
    pub tag: &'d [u8],
    /// `resarray`: up to and including the first failing operation.
    pub results: Vec<ResOp<'d>>,
}

impl<'d> XdrCodec<'d> for CompoundRes<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.status.0)?;
        e.string(self.tag)?;
        e.u32(self.results.len() as u32)?;
        for r in &self.results {
            r.encode(e)?;
        }
        Ok(())
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let status = Nfsstat4(c.u32()?);
        let tag = c.string(NAME_LIMIT)?;
        let n = c.count(MAX_OPS)?;
        let mut results = Vec::with_capacity(n as usize);
        for _ in 0..n {
            results.push(ResOp::decode(c)?);
        }
        Ok(CompoundRes {
            status,
            tag,
            results,
        })
    }
}
