#!/bin/bash
# HTTP protocol checks against the nginx of this recipe (nginx.conf), run
# from the host by `ukl apptest nginx`: nginx's own suite (nginx-tests)
# starts nginx binaries of its own and is not in Debian's source package.
# Each check prints "[pass] NAME" or "[fail] NAME: what was seen"; the last
# line is "N checks, M failed".
#
#   http-checks.sh HOST PORT
set -u
host=$1 port=$2
base="http://$host:$port"
checks=0 failed=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

check() {  # NAME EXPECTED ACTUAL
	checks=$((checks + 1))
	if [ "$2" = "$3" ]; then
		echo "[pass] $1"
	else
		failed=$((failed + 1))
		echo "[fail] $1: expected '$2', got '$3'"
	fi
}

status() {  # curl options...: the response's status code
	curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$@"
}

header() {  # NAME curl options...: that response header's value
	local name=$1
	shift
	curl -s -D - -o /dev/null --max-time 30 "$@" | tr -d '\r' |
		sed -n "s/^$name: //Ip" | head -1
}

raw() {  # REQUEST: the status line nginx answers a raw request with
	exec 3<>"/dev/tcp/$host/$port" || return
	printf '%b' "$1" >&3
	timeout 30 head -1 <&3 | tr -d '\r'
	exec 3<&-
}

check "GET a static file" 200 "$(status "$base/index.html")"
check "its length" 612 "$(curl -s --max-time 30 "$base/index.html" | wc -c)"
check "its Content-Length" 612 "$(header Content-Length "$base/index.html")"
check "its Content-Type" text/html "$(header Content-Type "$base/index.html")"
# HEAD, raw: all nginx sends, header and whatever follows it
exec 3<>"/dev/tcp/$host/$port" && printf 'HEAD /index.html HTTP/1.0\r\n\r\n' >&3 &&
	timeout 30 cat <&3 >"$tmp"
exec 3<&-
check "HEAD: the status" "HTTP/1.1 200 OK" "$(head -1 "$tmp" | tr -d '\r')"
header_bytes=$(LC_ALL=C awk 'BEGIN { RS = "\r\n\r\n" } NR == 1 { print length($0) + 4; exit }' "$tmp")
check "HEAD: nothing after the header" 0 "$(($(wc -c <"$tmp") - ${header_bytes:-0}))"
check "a missing file" 404 "$(status "$base/no-such-file")"
check "POST to a static file" 405 "$(status -X POST --data x "$base/index.html")"
check "a byte range" 206 "$(status -r 0-99 "$base/index.html")"
check "the range's Content-Range" "bytes 0-99/612" "$(header Content-Range -r 0-99 "$base/index.html")"
check "the range's length" 100 "$(curl -s -r 0-99 --max-time 30 "$base/index.html" | wc -c)"
check "a range past the end" 416 "$(status -r 1000-2000 "$base/index.html")"
modified=$(header Last-Modified "$base/index.html")
check "If-Modified-Since the file's date" 304 "$(status -H "If-Modified-Since: $modified" "$base/index.html")"
etag=$(header ETag "$base/index.html")
check "If-None-Match the file's ETag" 304 "$(status -H "If-None-Match: $etag" "$base/index.html")"
check "If-None-Match another ETag" 200 "$(status -H 'If-None-Match: "other"' "$base/index.html")"
check "keep-alive: two requests, one connection" "1 0" \
	"$(curl -s --max-time 30 -o /dev/null -o /dev/null -w '%{num_connects} ' "$base/index.html" "$base/ping" |
		sed 's/ $//')"
check "HTTP/1.0 without Host" "HTTP/1.1 200 OK" "$(raw 'GET /ping HTTP/1.0\r\n\r\n')"
check "HTTP/1.1 without Host" "HTTP/1.1 400 Bad Request" "$(raw 'GET /ping HTTP/1.1\r\n\r\n')"
check "a malformed request line" "HTTP/1.1 400 Bad Request" "$(raw 'GARBAGE\r\n\r\n')"
check "a URI longer than the header buffers" 414 "$(status "$base/$(head -c 9000 /dev/zero | tr '\0' a)")"
check "rewrite" 612 "$(curl -s --max-time 30 "$base/old/index.html" | wc -c)"
check "gzip: Content-Encoding" gzip "$(header Content-Encoding -H 'Accept-Encoding: gzip' "$base/gz/index.html")"
check "gzip: the body inflates to the file" 612 "$(curl -s --compressed --max-time 30 "$base/gz/index.html" | wc -c)"
check "auth_basic: no credentials" 401 "$(status "$base/private/index.html")"
check "auth_basic: the challenge" 'Basic realm="ukl"' "$(header WWW-Authenticate "$base/private/index.html")"
check "auth_basic: a wrong password" 401 "$(status -u ukl:wrong "$base/private/index.html")"
check "auth_basic: the right password" 200 "$(status -u ukl:secret "$base/private/index.html")"
echo "$checks checks, $failed failed"
[ "$failed" = 0 ]
