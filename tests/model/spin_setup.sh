# Sourced by the model checks (check_models.sh, check_shared_refresh.sh):
# skips (77) without spin or a compiler, and gives a scratch directory,
# $work, removed on exit. $src is the directory of the models.
src=$(cd "$(dirname "$0")" && pwd)
for need in spin cc; do
  command -v "$need" >/dev/null ||
    { echo "SKIP: $need is not installed (scripts/install-deps installs spin and a compiler)"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
