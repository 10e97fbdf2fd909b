#!/usr/bin/env bash
# funcdctl as a kubectl or faas-cli user meets it: several names, KIND/NAME,
# -o name fed back, -l, -A, -w, --show-labels, create secret, scale,
# completion, --version, "--", -o refused where it means nothing, deploy's
# flags and what a second deploy keeps, tracebacks in logs, URLs in wide
# views. Runs against a real funcd on ephemeral loopback ports; tables are
# compared with golden/*.txt (FUNCD_GOLDEN_UPDATE=1 rewrites them).
#
#   bash tests/cli/test_cli_ux.sh path/to/funcd path/to/funcdctl
set -u

FUNCD=${1:?usage: test_cli_ux.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_cli_ux.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

ADMIN=ux-admin-token
TEAM=ux-team-token

test_version_and_completion() {
    ctl --version
    expect "--version prints the client's version alone" 0 out "^funcdctl [0-9]+\.[0-9]+"
    if [ "$(grep -c . <<<"$OUT")" != 1 ]; then fail "--version prints one line"; fi
    ctl completion bash
    expect "completion bash prints a script" 0 out "^complete -F _funcdctl funcdctl$"
    printf '%s\n' "$OUT" >"$WORK/completion.bash"
    local got
    got=$(bash -c '. "$1"; COMP_WORDS=(funcdctl ge); COMP_CWORD=1; _funcdctl; echo "${COMPREPLY[*]}"' _ "$WORK/completion.bash")
    if [ "$got" = get ]; then ok "bash completes a command"; else fail "bash completes ge to get, not '$got'"; fi
    got=$(bash -c '. "$1"; COMP_WORDS=(funcdctl get func); COMP_CWORD=2; _funcdctl; echo "${COMPREPLY[*]}"' _ "$WORK/completion.bash")
    if [ "$got" = "function functions functionconfig functionconfigs" ]; then
        ok "bash completes a kind"
    else
        fail "bash completes get func to the kinds, not '$got'"
    fi
    got=$(bash -c '. "$1"; COMP_WORDS=(funcdctl deploy --mem); COMP_CWORD=2; _funcdctl; echo "${COMPREPLY[*]}"' _ "$WORK/completion.bash")
    if [ "$got" = --memory ]; then ok "bash completes a command's flag"; else fail "bash completes --mem to --memory, not '$got'"; fi
    ctl completion zsh
    expect "completion zsh goes through bashcompinit" 0 out "^#compdef funcdctl$" out "bashcompinit"
    ctl completion fish
    expect "completion of an unknown shell is a usage error" 2 err 'bash and zsh, not "fish"'
}

test_end_of_flags_and_outputs() {
    ctl invoke hello -- -d x
    expect "-- ends the flags: invoke takes -d as an operand" 2 \
        err 'invoke takes one function NAME, not also "-d"'
    ctl get -- -l
    expect "-- ends get's flags" 2 err 'unknown kind "-l"'
    ctl delete fn -- --ignore-not-found
    expect "-- ends delete's flags" 1 err "function/--ignore-not-found"
    ctl invoke hello -o json
    expect "invoke refuses -o" 2 err "invoke prints table, not -o json"
    ctl logs hello -o yaml
    expect "logs refuses -o yaml" 2 err "logs prints table or json, not -o yaml"
    ctl delete fn hello -o json
    expect "delete refuses -o json" 2 err "delete prints table or name, not -o json"
    ctl version -o name
    expect "version refuses -o name" 2 err "version prints table, json or yaml, not -o name"
    ctl apply -f "$HERE/app.yaml" -o wide
    expect "apply refuses -o wide" 2 err "apply prints table, json, yaml or name, not -o wide"
    ctl get fn --help
    expect "a command's help says which -o it prints" 0 \
        out "^Output \(-o\): table, wide, json, yaml or name\.$"
}

labelled() {
    cat <<YAML
apiVersion: funcd.dev/v1
kind: Secret
metadata: {name: $1, labels: {$2}}
type: Opaque
stringData: {k: v}
---
YAML
}

test_create_secret() {
    printf 'p4ss' >"$WORK/password"
    ctl create secret generic db --from-literal=user=app --from-file="$WORK/password" \
        --from-file=cert="$WORK/password"
    expect "create secret generic from literals and files" 0 out "^secret/db created$"
    ctl describe secret db
    expect "the Secret holds every key" 0 out "^  user: 3 bytes$" out "^  password: 4 bytes$" \
        out "^  cert: 4 bytes$" out "^Type: +Opaque$"
    ctl get secret db -o json
    expect "file bytes are base64 in data" 0 out '"password": "cDRzcw=="'
    ctl create secret generic db --from-literal=a=b
    expect "create of an existing Secret fails" 1 err "409" err "apply"
    ctl create secret generic bad --from-literal=novalue
    expect "--from-literal takes K=V" 2 err "--from-literal takes KEY=VALUE"
    ctl create secret generic bad --from-file="$WORK/nosuch"
    expect "--from-file of a missing file names it" 1 err "cannot open .*nosuch"
    ctl create secret generic twice --from-literal=a=1 --from-literal=a=2
    expect "a key given twice is an error" 1 err 'key "a" is given twice'
    ctl create configmap x
    expect "create makes Secrets only" 2 err "create makes Secrets"
    ctl create secret generic typed --type Opaque --from-literal=t=1 -o name
    expect "create --type, -o name" 0 out "^secret/typed$"
    ctl create secret generic typed2 --type example.com/token --from-literal=t=1
    expect "a type the server does not know" 1 err "type: must be one of"
    ctl delete secret db typed
    expect "delete several names" 0 out "^secret/db deleted$" out "^secret/typed deleted$"
}

test_names_and_selectors() {
    { labelled red 'team: a, tier: web'; labelled green 'team: a'; labelled blue 'team: b'
      labelled plain 'x: y'; } >"$WORK/labelled.yaml"
    ctl apply -f "$WORK/labelled.yaml"
    expect "apply labelled Secrets" 0 out "^secret/red created$"
    ctl apply -f "$HERE/app.yaml"
    ctl get secrets blue red
    expect_golden "get KIND NAME NAME: one table" 0 get-two-names
    ctl get secret/red functionconfig/set-namespace secret/blue
    expect_golden "get KIND/NAME of two kinds: a table per run of a kind" 0 get-kind-slash-name
    ctl get secrets red nosuch blue
    expect "a missing name fails the command but the rest print" 1 out "^red " out "^blue " \
        err 'secret/nosuch: .*not found'
    ctl get secrets red blue -o json
    expect "several names as JSON are a v1 List" 0 out '"kind": "List"' out '"name": "blue"'
    ctl get secrets -l team=a -o name
    expect "-o name lists KIND/NAME" 0 out "^secret/green$" out "^secret/red$"
    # shellcheck disable=SC2046
    ctl get $(cat "$WORK/out")
    expect "get accepts what -o name printed" 0 out "^green " out "^red "
    ctl get secrets -l team=a --show-labels
    expect_golden "get -l k=v --show-labels" 0 get-selector-labels
    ctl get secrets -l 'team!=a'
    expect_golden "get -l k!=v (no label also matches)" 0 get-selector-not
    ctl get secrets -l 'team,!tier'
    expect_golden "get -l k,!k2" 0 get-selector-exists
    ctl get secrets -l team=nobody
    expect "a selector that matches nothing" 0 err 'No secrets found in namespace "default"'
    ctl get secrets -l 'team in (a,b)'
    expect "a set-based selector is refused by the server" 1 err "labelSelector" err "400"
    ctl get secrets red -l team=a
    expect "-l with a NAME is a usage error" 2 err "give no NAME with it"
    ctl get secret/red fn
    expect "KIND/NAME and KIND NAME mixed is a usage error" 2 \
        err "give KIND/NAME for every object"
    ctl delete $(grep -v '^$' <<<"$("$CTL" get secrets -l team=a -o name)")
    expect "delete accepts what -o name printed" 0 out "^secret/green deleted$" \
        out "^secret/red deleted$"
    ctl delete secrets -l team=b
    expect "delete -l deletes what matches" 0 out "^secret/blue deleted$"
    ctl get secrets --show-labels
    expect "only the unmatched Secret is left" 0 out "^plain +Opaque +1 +[0-9]+[smhd] +x=y$"
}

test_all_namespaces() {
    FUNCD_TOKEN=$ADMIN ctl -n team-b create secret generic far --from-literal=a=1
    expect "an admin creates in another namespace" 0 out "^secret/far created$"
    FUNCD_TOKEN=$ADMIN ctl get secrets -A
    expect_golden "get -A as admin: every namespace, a NAMESPACE column" 0 get-all-admin
    ctl get secrets -A
    expect "a developer's -A lists only its namespaces" 0 out "^default +plain "
    if grep -q far <<<"$OUT"; then fail "a developer's -A shows another namespace"; fi
    FUNCD_TOKEN=$TEAM ctl get secrets -A -o name
    expect "a token of team-b lists team-b alone" 0 out "^secret/far$"
    if grep -q plain <<<"$OUT"; then fail "team-b's -A shows default"; fi
    ctl get secrets plain -A
    expect "-A with a NAME is a usage error" 2 err "give no NAME with it"
    FUNCD_TOKEN=$ADMIN ctl -n team-b delete secret far
}

test_get_watch() {
    bg_ctl "$WORK/w.out" "$WORK/w.err" get secrets -w -l team=w
    sleep 0.5
    labelled watched 'team: w' | ctl apply -f -
    labelled unwatched 'team: v' | ctl apply -f -
    ctl delete secret watched unwatched
    wait_for "$WORK/w.out" "^watched " && sleep 0.3
    stop_bg "$WORK/w.out" "$WORK/w.err" get secrets -w -l team=w
    expect "get -w prints a row per change of what -l selects, until Ctrl-C" 0 \
        out "^NAME +TYPE +DATA +AGE$" out "^watched +Opaque +1 "
    if grep -q unwatched <<<"$OUT"; then fail "get -w -l shows an object -l does not select"; fi
    bg_ctl "$WORK/w.out" "$WORK/w.err" get secret plain -w -o name
    sleep 0.5
    labelled plain 'x: z' | ctl apply -f -
    for _ in $(seq 100); do
        [ "$(grep -c '^secret/plain$' "$WORK/w.out")" -ge 2 ] && break
        sleep 0.1
    done
    stop_bg "$WORK/w.out" "$WORK/w.err" get secret plain -w -o name
    expect "get NAME -w follows that object" 0 out "^secret/plain$"
    if [ "$(grep -c '^secret/plain$' <<<"$OUT")" != 2 ]; then
        fail "get NAME -w prints the object, then its one change"
    fi
}

python_handler() {
    mkdir -p "$WORK/$1"
    cat >"$WORK/$1/main.py"
    echo "$WORK/$1"
}

test_deploy_scale_url() {
    local dir
    dir=$(python_handler hello-ux <<'PY'
def handler(req):
    return {'ok': True}
PY
)
    ctl deploy "$dir" --name hello-ux --runtime python3 --handler main.handler --label app=hello \
        --label tier=web --queue 7 --idle-timeout 2m --wait-timeout 30s
    expect "deploy --label --queue --idle-timeout" 0 out "^function/hello-ux ready$"
    ctl get fn hello-ux -o json
    expect "deploy wrote labels and scaling" 0 out '"app": "hello"' out '"tier": "web"' \
        out '"queueLength": 7' out '"idleTimeout": "2m"'
    local bundle
    bundle=$(grep -oE 'sha256:[0-9a-f]{64}' <<<"$OUT" | head -n 1)
    cat >"$WORK/hello-ux.yaml" <<YAML
apiVersion: funcd.dev/v1
kind: Function
metadata: {name: hello-ux, labels: {app: hello, tier: web}}
spec:
  runtime: python3
  handler: main.handler
  source: {bundle: "$bundle"}
  env: {FROM_APPLY: "yes"}
  scaling: {queueLength: 9, idleTimeout: 2m}
  timeout: 12s
YAML
    ctl apply -f "$WORK/hello-ux.yaml"
    expect "apply sets fields deploy did not" 0 out "^function/hello-ux configured$"
    ctl deploy "$dir" --name hello-ux --runtime python3 -e MORE=1 --label tier=api \
        --wait-timeout 30s
    expect "a second deploy" 0 out "^function/hello-ux ready$"
    ctl get fn hello-ux -o json
    expect "a second deploy keeps what it was not told to change" 0 out '"timeout": "12s"' \
        out '"FROM_APPLY": "yes"' out '"MORE": "1"' out '"queueLength": 9' \
        out '"handler": "main.handler"' out '"app": "hello"' out '"tier": "api"'
    ctl deploy "$dir" --name limited --runtime python3 --handler main.handler --memory 64Mi \
        --cpu 500m --pids 64 --no-wait
    expect "deploy --memory --cpu --pids" 0 out "^function/limited (created|configured)$"
    ctl get fn limited -o json
    expect "deploy wrote spec.resources" 0 out '"memory": "64Mi"' out '"cpu": "500m"' \
        out '"pids": 64'
    ctl delete fn limited
    ctl deploy "$dir" --name x --runtime python3 --memory lots
    expect "deploy --memory takes a quantity" 2 err "--memory takes a quantity"
    ctl deploy "$dir" --name x --runtime python3 --label novalue
    expect "deploy --label takes K=V" 2 err "--label takes KEY=VALUE"

    ctl scale hello-ux --min 1 --max 3
    expect "scale --min --max" 0 out "^function/hello-ux scaled$"
    ctl get fn hello-ux -o json
    expect "scale wrote spec.scaling" 0 out '"minReplicas": 1' out '"maxReplicas": 3' \
        out '"queueLength": 9'
    ctl scale fn/hello-ux --replicas 2 -o name
    expect "scale fn/NAME --replicas, -o name" 0 out "^function/hello-ux$"
    ctl get fn hello-ux -o json
    expect "--replicas sets both" 0 out '"minReplicas": 2' out '"maxReplicas": 2'
    ctl scale fn hello-ux --replicas 0
    expect "scale --replicas 0 is refused (max at least 1)" 2 err "--max is at least 1"
    ctl scale hello-ux
    expect "scale without a count" 2 err "needs --replicas N"
    ctl scale nosuch --max 2
    expect "scale of a missing Function" 1 err "function/nosuch" err "404"
    ctl scale secret/plain --max 1
    expect "only Functions scale" 2 err "only Functions scale"
    ctl scale hello-ux --min 5 --max 4
    expect "the server's bound on min and max" 1 err "maxReplicas"
    ctl scale hello-ux --min 0 --max 2

    local url
    url=$("$CTL" get fn hello-ux -o json >/dev/null 2>&1; "$CTL" version -o json | sed -n 's/.*"dataPlane": *"\([^"]*\)".*/\1/p')
    ctl get fn hello-ux -o wide
    expect "get -o wide shows the function's URL" 0 \
        out "^NAME +READY +REPLICAS +AGE +REASON +URL +GENERATION +RESOURCE-VERSION$" \
        out "^hello-ux +True .* http://$url/fn/default/hello-ux/ "
    local fn_url
    fn_url=$(grep -oE 'http://[^ ]+/fn/default/hello-ux/' <<<"$OUT")
    ctl describe fn hello-ux
    expect "describe shows the function's URL" 0 out "^URL: +http://$url/fn/default/hello-ux/$"
    if curl -sf "$fn_url" | grep -q '"ok"'; then ok "the URL shown answers"; else fail "the URL $fn_url does not answer"; fi
    ctl describe fn hello-ux -o yaml
    expect "describe -o yaml" 0 out "^kind: Function" out "name: hello-ux"
    ctl describe fn/hello-ux secret/plain
    expect "describe several objects" 0 out "^Name: +hello-ux$" out "^Name: +plain$"
}

test_logs_traceback() {
    local dir
    dir=$(python_handler raising <<'PY'
def handler(req):
    raise ValueError("boom from the handler")
PY
)
    ctl deploy "$dir" --name raising --runtime python3 --handler main.handler --wait-timeout 30s
    ctl invoke raising
    expect "invoking a raising handler fails" 1 err "boom from the handler"
    logs_until_ux "Traceback" raising
    expect "logs shows the traceback under the record" 0 \
        out "ERROR handler raised ValueError: boom from the handler$" \
        out "^    Traceback \(most recent call last\):$" \
        out "^    ValueError: boom from the handler$"
    if command -v node >/dev/null 2>&1; then
        mkdir -p "$WORK/throwing"
        cat >"$WORK/throwing/index.js" <<'JS'
exports.handler = async () => { throw new Error('thrown from node'); };
JS
        ctl deploy "$WORK/throwing" --name throwing --runtime node --handler 'index.js#handler' \
            --wait-timeout 30s
        ctl invoke throwing
        logs_until_ux "^    Error: thrown from node" throwing
        expect "logs shows a node stack under the record" 0 \
            out "^    Error: thrown from node$" out "^        at .*index\.js"
    fi
}

logs_until_ux() {
    local pattern=$1
    shift
    for _ in $(seq 50); do
        ctl logs "$@"
        grep -qE -- "$pattern" <<<"$OUT" && return
        sleep 0.1
    done
}

test_fn_eval_server() {
    ctl --server http://127.0.0.1:1 fn eval set-namespace -f "$HERE/fn-resources.yaml"
    expect "fn eval with an unreachable --server says so, no silent fallback" 1 \
        err "cannot reach funcd at http://127.0.0.1:1" err "--runner or FUNCD_FN_RUNNER"
    FUNCD_SERVER=http://127.0.0.1:1 ctl fn eval set-namespace -f "$HERE/fn-resources.yaml"
    expect "fn eval with an unreachable FUNCD_SERVER says so" 1 err "cannot reach funcd at"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" -o json
    expect "fn eval refuses -o" 2 err "fn prints table, not -o json"
}

printf '%s developer team-b\n%s admin *\n' "$TEAM" "$ADMIN" >"$WORK/tokens"
chmod 600 "$WORK/tokens"
start_funcd --token-file "$WORK/tokens"
test_version_and_completion
test_end_of_flags_and_outputs
test_create_secret
test_names_and_selectors
test_all_namespaces
test_get_watch
test_fn_eval_server
if grep -q '"dataPlane"' <<<"$("$CTL" version -o json 2>/dev/null)" && [ ${#SHIMS_ARGS[@]} -gt 0 ]; then
    test_deploy_scale_url
    test_logs_traceback
else
    echo "# SKIP deploy, scale, logs: this funcd serves no functions"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
