-- wrk script for `make bench`: GET /v1/access/{asid} for random ASIDs of the database
-- (ASIDS names a file of them, one per line), or, with BATCH=N, POST /v1/access with N
-- random ASIDs per request.
local asids = {}
local bodies = {}
local batch = tonumber(os.getenv("BATCH") or "0")

init = function(args)
  for line in io.lines(os.getenv("ASIDS")) do asids[#asids + 1] = line end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 1000)
  if batch > 0 then
    for b = 1, 32 do
      local picked = {}
      for i = 1, batch do picked[i] = '"' .. asids[math.random(#asids)] .. '"' end
      bodies[b] = '{"asids":[' .. table.concat(picked, ",") .. ']}'
    end
  end
end

request = function()
  if batch > 0 then
    return wrk.format("POST", "/v1/access", {["Content-Type"] = "application/json"}, bodies[math.random(#bodies)])
  end
  return wrk.format("GET", "/v1/access/" .. asids[math.random(#asids)])
end
