#!/usr/bin/env bash
# Claude Code (Anthropic's /v1/messages) and Codex CLI (OpenAI's /v1/responses) run against `clover-local serve`,
# end to end, on the tiny model: what the README reports was seen this way (2026-12-05: Claude Code 2.1.197,
# 15 streamed requests answered 200; Codex CLI 0.171.0, its request answered 200 and the streamed text printed).
# The tiny model knows nothing of agents, so the answers are noise; this checks the wire formats, not the model.
#   bash docs/agent_clients_check.sh            (needs npm and a free port 8123; installs both clients in a temp dir)
set -euo pipefail
work=$(mktemp -d)
server=""
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
npm install --silent @anthropic-ai/claude-code @openai/codex >/dev/null

# the shipped tiny model with a chat template that reads tools (the shipped one does not, so serve refuses them)
model_dir=$(python3 -c "from clover_local.loader import SHORT_NAMES; print(SHORT_NAMES['tiny'])")
cp -r "$model_dir" tiny-tools
{ printf '%s\n' "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}{{- tool.function.name + '\\n' }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
  cat "$model_dir/chat_template.jinja"; } > tiny-tools/chat_template.jinja

clover-local serve tiny-tools --port 8123 --device cpu --model-name tiny --max-tokens 256 2> serve.log &
server=$!
for _ in $(seq 60); do curl -sf -o /dev/null http://127.0.0.1:8123/health && break; sleep 1; done

mkdir -p home/.codex project
cat > home/.codex/config.toml <<'EOF'
model = "tiny"
model_provider = "local"
[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:8123/v1"
wire_api = "responses"
EOF
(cd project && HOME="$work/home" ANTHROPIC_BASE_URL=http://127.0.0.1:8123 ANTHROPIC_AUTH_TOKEN=local \
   ANTHROPIC_MODEL=tiny ANTHROPIC_SMALL_FAST_MODEL=tiny CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
   timeout 600 "$work/node_modules/.bin/claude" -p "hello" --output-format json > ../claude.json || true)
(cd project && HOME="$work/home" CODEX_HOME="$work/home/.codex" \
   timeout 600 "$work/node_modules/.bin/codex" exec --skip-git-repo-check "hello" < /dev/null > ../codex.txt 2>&1 || true)

echo "claude --version: $("$work/node_modules/.bin/claude" --version)"
echo "codex --version:  $("$work/node_modules/.bin/codex" --version)"
echo "requests the server answered (path, status):"
grep -oE '"(POST|HEAD|GET) [^ ]+ HTTP/1.1" [0-9]+' serve.log | sort | uniq -c
echo "Claude Code's result line: $(head -c 300 claude.json)"
echo "Codex's last lines:"; tail -4 codex.txt
