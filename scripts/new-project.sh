#!/usr/bin/env bash
# Scaffolds a workspace project: scripts/new-project.sh libs|apps NAME "description" [dep ...]
set -euo pipefail
kind=$1 name=$2 desc=$3; shift 3
dir="$kind/$name"; pkg="@runplane/$name"; [ "$kind" = apps ] && pkg="@runplane/app-$name"
mkdir -p "$dir/src" "$dir/test"
deps=""; refs=""
for d in "$@"; do
  deps="$deps\"@runplane/$d\": \"*\","; refs="$refs{ \"path\": \"../../libs/$d\" },"
done
cat > "$dir/package.json" <<JSON
{
  "name": "$pkg",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "description": "$desc",
  "exports": { ".": { "types": "./dist/index.d.ts", "default": "./dist/index.js" } },
  "scripts": { "build": "tsc -b" },
  "dependencies": { ${deps%,} }
}
JSON
cat > "$dir/tsconfig.json" <<JSON
{
  "extends": "../../tsconfig.base.json",
  "compilerOptions": { "outDir": "dist", "rootDir": "src", "tsBuildInfoFile": "dist/tsconfig.tsbuildinfo" },
  "include": ["src"],
  "references": [${refs%,}]
}
JSON
[ -f "$dir/src/index.ts" ] || echo "export {};" > "$dir/src/index.ts"
