# shellcheck shell=bash
# Sourced by the bench scripts: CPU time of processes, from /proc.

# utime + stime, in clock ticks, of the given processes.
ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || true; done | awk '{s += $1} END {print s + 0}'; }
# PostgreSQL's processes: the throwaway server's (its postmaster and children) when it is
# ours, else every process of the `postgres` user.
server() {
  if [ -n "${FORMICA_PG_DATA:-}" ]; then
    local postmaster; postmaster=$(head -1 "$FORMICA_PG_DATA/postmaster.pid")
    # shellcheck disable=SC2046
    echo "$postmaster" $(pgrep -P "$postmaster")
  else
    pgrep -u postgres
  fi
}
