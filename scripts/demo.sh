#!/usr/bin/env bash
# `make demo`: the main job on the embedded default. fathom starts a disposable local
# cluster, runs the OSD study (quick scale), stores every point, stops the cluster,
# and writes the report. Everything lands under ./demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
FATHOM=.venv/bin/fathom
OUT=demo
mkdir -p "$OUT"
DB="$OUT/fathom-results.db"
NAME="osd-classic-quick-$(date +%Y%m%d-%H%M%S)"

echo "== fathom demo: OSD study (osd-classic --quick) on a disposable local cluster"
"$FATHOM" run osd-classic --quick --db "$DB" --name "$NAME"
echo "== report"
"$FATHOM" report "$NAME" --db "$DB" -o "$OUT/report.html"
"$FATHOM" report "$NAME" --db "$DB" -o "$OUT/report.md"
"$FATHOM" export "$NAME" --db "$DB" --format csv -o "$OUT/points.csv"
echo
echo "demo done:"
echo "  report      $OUT/report.html (and $OUT/report.md)"
echo "  points      $OUT/points.csv"
echo "  results db  $DB  (fathom ls --db $DB; fathom show $NAME --db $DB)"
