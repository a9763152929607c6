# guest: runs its arguments as a command, e.g. a host-built test binary:
#   run.sh tools/lab/guest/exec.sh /work/main/target/debug/deps/foo-1234 --test-threads=1
[ $# -ge 1 ] || { echo "exec.sh: no command given" >&2; exit 2; }
exec "$@"
