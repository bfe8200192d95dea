#!/usr/bin/env bash
# Claude Code (Anthropic's /v1/messages) and Codex CLI (OpenAI's /v1/responses) run against `clover-local serve`,
# end to end, twice each:
#   1. on the tiny model (a copy whose chat template reads tools): the wire formats under real requests (streamed
#      answers, thinking, late system messages, namespaces, hosted tools); the tiny model knows nothing of agents,
#      so its answers are noise and may end on the token limit;
#   2. on a scripted decoder (docs/scripted_serve.py): the agent's whole loop — the model calls a shell tool, the
#      client runs it, sends the result back, the model answers — which must end with "All done".
# Seen 2026-12-05 (CPU machine): Claude Code 2.1.197 and Codex CLI 0.171.0, every request answered 200, both
# loops ran `echo hello-from-tool` and ended with the scripted answer.
#   bash docs/agent_clients_check.sh            (needs npm and a free port 8123; installs both clients in a temp dir)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
server=""
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
npm install --silent @anthropic-ai/claude-code @openai/codex >/dev/null
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"

# the shipped tiny model with a chat template that reads tools and tool results (the shipped one reads neither)
model_dir=$(python3 -c "from clover_local.loader import SHORT_NAMES; print(SHORT_NAMES['tiny'])")
cp -r "$model_dir" tiny-tools
python3 -c "from tests.test_serve_tools import TOOL_TEMPLATE; print(TOOL_TEMPLATE, end='')" > tiny-tools/chat_template.jinja

mkdir -p home/.codex project
cat > home/.codex/config.toml <<'EOF'
model = "tiny"
model_provider = "local"
[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:8123/v1"
wire_api = "responses"
EOF

serve() {  # serve [scripted CALL_TEXT]: the tiny copy, or the scripted decoder answering CALL_TEXT first
  kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
  if [ $# -eq 0 ]; then
    clover-local serve tiny-tools --port 8123 --device cpu --model-name tiny --max-tokens 256 2>> serve.log &
  else
    python3 "$repo/docs/scripted_serve.py" tiny-tools 8123 "$2" 2>> serve.log &
  fi
  server=$!
  for _ in $(seq 60); do curl -sf -o /dev/null http://127.0.0.1:8123/health && return; sleep 1; done
  echo "the server did not start" >&2; exit 1
}
claude() {
  (cd project && HOME="$work/home" ANTHROPIC_BASE_URL=http://127.0.0.1:8123 ANTHROPIC_AUTH_TOKEN=local \
     ANTHROPIC_MODEL=tiny ANTHROPIC_SMALL_FAST_MODEL=tiny CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
     timeout 600 "$work/node_modules/.bin/claude" -p "$1" --allowedTools Bash --output-format json || true)
}
codex() {
  (cd project && HOME="$work/home" CODEX_HOME="$work/home/.codex" timeout 600 "$work/node_modules/.bin/codex" \
     exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$1" < /dev/null 2>&1 || true)
}
tool_call() {  # the Qwen XML form of a call to $1 with one parameter $2 = $3
  printf 'Running it.\n<tool_call>\n<function=%s>\n<parameter=%s>\n%s\n</parameter>\n</function>\n</tool_call>' "$1" "$2" "$3"
}

echo "claude --version: $("$work/node_modules/.bin/claude" --version)"
echo "codex --version:  $("$work/node_modules/.bin/codex" --version)"
serve
echo "== tiny model, Claude Code: $(claude hello | head -c 240)"
echo "== tiny model, Codex:"; codex hello | tail -3
serve scripted "$(tool_call Bash command 'echo hello-from-tool')"
echo "== scripted loop, Claude Code: $(claude 'run echo' | head -c 400)"
serve scripted "$(tool_call exec_command cmd 'echo hello-from-tool')"
echo "== scripted loop, Codex:"; codex 'run echo' | grep -v -i '^warning' | tail -8
echo "== requests the servers answered (path, status):"
grep -oE '"(POST|HEAD|GET) [^ ]+ HTTP/1.1" [0-9]+' serve.log | sort | uniq -c
