-- A small Lua program for the lua5.4 recipe: tables, closures, coroutines,
-- string patterns, integer and float arithmetic, files and errors.
local function primes(n)
  local sieve, out = {}, {}
  for i = 2, n do
    if not sieve[i] then
      out[#out + 1] = i
      for j = i * i, n, i do sieve[j] = true end
    end
  end
  return out
end

local p = primes(100000)
print(string.format("primes below 100000: %d, the last %d", #p, p[#p]))

local fib = coroutine.wrap(function()
  local a, b = 0, 1
  while true do coroutine.yield(a); a, b = b, a + b end
end)
local f
for _ = 1, 91 do f = fib() end
print("fib(90) = " .. f)

local words = {}
for w in ("the quick brown fox jumps over the lazy dog the end"):gmatch("%a+") do
  words[w] = (words[w] or 0) + 1
end
print("'the' occurs " .. words.the .. " times")

local name = os.tmpname()
local fh = assert(io.open(name, "w"))
for i = 1, 1000 do fh:write(i, "\n") end
fh:close()
local sum = 0
for line in io.lines(name) do sum = sum + tonumber(line) end
os.remove(name)
print("sum from file = " .. sum)

local ok, err = pcall(function() error({code = 42}) end)
print("pcall caught code " .. (not ok and err.code or "none"))
print(string.format("pi ~ %.6f, 2^63 wraps to %d", math.pi, math.maxinteger + 1))
print(_VERSION .. " done")
