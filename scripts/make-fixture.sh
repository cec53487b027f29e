#!/usr/bin/env bash
# Rebuilds repos-fixture/: the demo tenants as bare git repositories with a short history.
# Uses git plumbing with fixed dates, so the result is the same on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=repos-fixture/tenants
rm -rf repos-fixture
mkdir -p "$out"

export GIT_COMMITTER_NAME=planfiles GIT_COMMITTER_EMAIL=planfiles@localhost

# commit REPO DATE AUTHOR EMAIL MESSAGE FILE CONTENT [FILE CONTENT]
commit() {
  local repo=$1 date=$2 name=$3 email=$4 msg=$5
  shift 5
  local parent tree entries=""
  parent=$(git --git-dir="$repo" rev-parse -q --verify refs/heads/main || true)
  declare -A files=()
  if [ -n "$parent" ]; then
    while read -r mode type oid path; do files[$path]="$mode $type $oid"; done \
      < <(git --git-dir="$repo" ls-tree "$parent")
  fi
  while [ $# -gt 0 ]; do
    local oid
    oid=$(printf '%s' "$2" | git --git-dir="$repo" hash-object -w --stdin)
    files[$1]="100644 blob $oid"
    shift 2
  done
  for path in "${!files[@]}"; do entries+="${files[$path]}	$path"$'\n'; done
  tree=$(printf '%s' "$entries" | git --git-dir="$repo" mktree)
  local c
  c=$(GIT_AUTHOR_NAME=$name GIT_AUTHOR_EMAIL=$email GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date \
    git --git-dir="$repo" commit-tree "$tree" ${parent:+-p "$parent"} -m "$msg")
  git --git-dir="$repo" update-ref refs/heads/main "$c"
}

new_repo() {
  local repo=$out/$1.git
  git init -q --bare -b main "$repo"
  rm -rf "$repo/hooks" "$repo/description" "$repo/info"
  git --git-dir="$repo" config planfiles.sourcehosting "$2"
  commit "$repo" "2026-09-01T09:00:00Z" planfiles planfiles@localhost "Create tenant $1" \
    integrations.yml $'{}\n' configuration.yml $'folders: []\n'
}

# acme: source hosting on; cloud accounts, compliance automation, scan folders.
new_repo acme true
r=$out/acme.git
commit "$r" "2026-09-03T10:12:00Z" "Dana Whitfield" dana@acme.example $'Update integrations.yml\n\nRequest-Id: 3f1c2a9e-5d41-4a7b-9e0f-1b2c3d4e5f60' \
  integrations.yml $'aws:\n  - account_id: "123456789012"\n    regions:\n      - us-east-1\n      - eu-west-1\n    type: aws\n'
commit "$r" "2026-09-10T14:30:00Z" "Dana Whitfield" dana@acme.example $'Update configuration.yml\n\nRequest-Id: 8a7b6c5d-4e3f-4210-9876-543210fedcba' \
  configuration.yml $'folders:\n  - path: services/payments\n    exclude:\n      - "**/*_test.go"\n      - vendor/**\n  - path: web\n    exclude:\n      - node_modules/**\n'
commit "$r" "2026-10-02T08:45:00Z" "Sam Okafor" sam@acme.example $'Update integrations.yml\n\nRequest-Id: c0ffee00-1234-4abc-8def-0123456789ab' \
  integrations.yml $'aws:\n  - account_id: "123456789012"\n    regions:\n      - us-east-1\n      - eu-west-1\n    type: aws\n  - account_id: "210987654321"\n    regions:\n      - us-west-2\n    type: aws\ndrata:\n  user_email: compliance@acme.example\n  workspace: acme-prod\n'

# globex: no source hosting; one cloud account.
new_repo globex false
r=$out/globex.git
commit "$r" "2026-09-15T16:05:00Z" "Lee Moreau" lee@globex.example $'Update integrations.yml\n\nRequest-Id: 0d9e8f7a-6b5c-4d3e-a2f1-0e9d8c7b6a59' \
  integrations.yml $'aws:\n  - account_id: "555566667777"\n    regions:\n      - ap-southeast-2\n    type: aws\n'
commit "$r" "2026-09-16T09:20:00Z" "Lee Moreau" lee@globex.example $'Update configuration.yml\n\nRequest-Id: 11112222-3333-4444-8555-666677778888' \
  configuration.yml $'folders:\n  - path: src\n    exclude:\n      - docs/**\n'

# initech: a new tenant, nothing configured yet.
new_repo initech false

for repo in "$out"/*.git; do git --git-dir="$repo" fsck --strict --no-dangling; done
echo "rebuilt $(ls "$out" | wc -l) tenants in $out"
