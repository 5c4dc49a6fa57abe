-- wrk script for bench/enqueue.py: each wrk thread posts the bodies of one file, one
-- request at a time over its one connection, and notes every answer.
--
--   wrk -t N -c N -d 1h --timeout 60s -s enqueue.lua URL -- PATH FOLDER
--
-- FOLDER holds share-1.jsonl ... share-N.jsonl (one request body a line, written by
-- enqueue.py); at the end this script writes FOLDER/outcome.txt: "status CODE COUNT"
-- lines, "id ID" lines for every message id in a 201 answer, the count of requests
-- that got no answer ("errors N") and wrk's latency figures in microseconds.

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("number", #threads)
end

function init(args)
   path, folder = args[1], args[2]
   bodies = {}
   for line in io.lines(folder .. "/share-" .. number .. ".jsonl") do
      bodies[#bodies + 1] = line
   end
   sent, statuses, ids = 0, {}, {}
   -- wrk calls the first thread's request() once more, before it connects, to check
   -- what it returns; that request is never sent.
   checked = number ~= 1
end

function request()
   if not checked then
      checked = true
      return wrk.format("POST", path, nil, bodies[1])
   end
   sent = sent + 1
   if sent > #bodies then
      -- One request in flight per connection: every earlier one has been answered (or
      -- has failed). The loop stops before this one's answer is read; a GET of the
      -- description changes nothing on the server.
      wrk.thread:stop()
      return wrk.format("GET", "/api/openapi.json")
   end
   return wrk.format("POST", path, nil, bodies[sent])
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
   if status == 201 then
      for id in body:gmatch('"id":%s*(%d+)') do
         ids[#ids + 1] = id
      end
   end
end

function done(summary, latency, requests)
   local out = assert(io.open(threads[1]:get("folder") .. "/outcome.txt", "w"))
   for _, thread in ipairs(threads) do
      for status, count in pairs(thread:get("statuses")) do
         out:write("status ", status, " ", count, "\n")
      end
      for _, id in ipairs(thread:get("ids")) do
         out:write("id ", id, "\n")
      end
   end
   local e = summary.errors
   out:write("errors ", e.connect + e.read + e.write + e.timeout, "\n")
   out:write("latency p50 ", latency:percentile(50), "\n")
   out:write("latency p99 ", latency:percentile(99), "\n")
   out:write("latency max ", latency.max, "\n")
   out:close()
end
