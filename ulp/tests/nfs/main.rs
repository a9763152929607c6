//! NFS: NFSv3 and MOUNT codecs, the host-directory backend, RPC over TCP, NFS over
//! RPC-over-RDMA end to end, the duplicate request cache, and the NFSv4.1 client. One
//! test binary, one module per former file.

#[path = "../nfs_support/mod.rs"]
mod nfs_support;

mod nfs41_client;
mod nfs41_server;
mod nfs_drc;
mod nfs_e2e;
mod nfs_hostfs;
mod nfs_tcp;
mod nfs_v3_codec;
