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

# Comparing runs (bench/ab, bench/settle-ablations): PostgreSQL's CPU a job in a run's output
# (drain-cpu prints "PostgreSQL CPU 2.50 s (50.0 us/job)", settle-cost "PostgreSQL CPU 22.2
# us/job"), empty if there is none; and the median, lowest and highest of the figures given.
cpu_per_job() { grep -oE 'PostgreSQL CPU ([0-9.]+ s \()?[0-9.]+ us/job' <<< "$1" | head -1 | grep -oE '[0-9.]+ us/job' | cut -d' ' -f1 || true; }
median_range() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
  printf "%s %s %s\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'; }
