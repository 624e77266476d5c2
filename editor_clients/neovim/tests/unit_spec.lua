-- Unit tests of the plugin's pure parts and its extmark drawing, run inside `nvim --headless -u NONE`
-- by tests/e2e/test_neovim_lua_units.py. Writes {passed = n, failures = {...}} to $SPECLS_UNIT_RESULT.
vim.opt.runtimepath:append(vim.env.SPECLS_PLUGIN_DIR)
local config = require('specls.config')
local ghost = require('specls.ghost')
local position = require('specls.position')
local suggestion = require('specls.suggestion')

local tests = {}
local function eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(('%s: expected %s, got %s'):format(what or 'value', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

tests['take: word, line and all'] = function()
  eq(suggestion.take('urn a + b', 'word'), 'urn')
  eq(suggestion.take(' a + b', 'word'), ' a')
  eq(suggestion.take(' + b', 'word'), ' +')
  eq(suggestion.take('(x)\n    y', 'word'), '(')
  eq(suggestion.take('\n    return x', 'word'), '\n    return')
  eq(suggestion.take('a = 1\nb = 2', 'line'), 'a = 1')
  eq(suggestion.take('\nb = 2\nc', 'line'), '\nb = 2')
  eq(suggestion.take('a\nb', 'all'), 'a\nb')
end

tests['first_item: inline list, bare array, completion edit, nothing'] = function()
  local cmd = { title = 't', command = 'specls.accept', arguments = { '7' } }
  eq(suggestion.first_item({ items = { { insertText = 'abc', command = cmd } } }).text, 'abc')
  eq(suggestion.first_item({ { insertText = { kind = 'snippet', value = 'xyz' } } }).text, 'xyz')
  local range = { start = { line = 0, character = 2 }, ['end'] = { line = 0, character = 4 } }
  local item = suggestion.first_item({
    isIncomplete = true,
    items = { { label = 'ret', textEdit = { range = range, newText = 'return x' }, command = cmd } },
  })
  eq(item, { text = 'return x', range = range, command = cmd })
  eq(suggestion.first_item({ items = {} }), nil)
  eq(suggestion.first_item(nil), nil)
end

tests['ghost_for: drops what is typed, rejects what no longer fits'] = function()
  local range = { start = { line = 0, character = 4 }, ['end'] = { line = 0, character = 7 } }
  eq(suggestion.ghost_for({ text = 'return a' }, '    ret', 7, 'utf-16'), { text = 'return a', end_col = 7 })
  eq(
    suggestion.ghost_for({ text = 'return a', range = range }, '    ret', 7, 'utf-16'),
    { text = 'urn a', end_col = 7 }
  )
  eq(suggestion.ghost_for({ text = 'print(x)', range = range }, '    ret', 7, 'utf-16'), nil)
  eq(suggestion.ghost_for({ text = 'ret', range = range }, '    ret', 7, 'utf-16'), nil)
end

tests['ghost_for: ranges in UTF-16 over non-ASCII text'] = function()
  local line = 'é😀ab' -- bytes: é 2, 😀 4; UTF-16 units: é 1, 😀 2
  local range = { start = { line = 0, character = 3 }, ['end'] = { line = 0, character = 4 } }
  -- character 3 is byte 6, the 'a': typed so far is 'a'
  eq(suggestion.ghost_for({ text = 'abc', range = range }, line, 7, 'utf-16'), { text = 'bc', end_col = 7 })
  eq(suggestion.ghost_for({ text = 'xbc', range = range }, line, 7, 'utf-16'), nil)
  eq(suggestion.ghost_for({ text = 'abcd', range = range }, line, 8, 'utf-16'), { text = 'cd', end_col = 8 })
end

tests['position: byte columns <-> LSP characters'] = function()
  local line = 'aé😀b'
  eq(position.to_lsp(line, 3, 'utf-16'), 2)
  eq(position.to_lsp(line, 7, 'utf-16'), 4)
  eq(position.to_lsp(line, 7, 'utf-32'), 3)
  eq(position.to_lsp(line, 7, 'utf-8'), 7)
  eq(position.from_lsp(line, 4, 'utf-16'), 7)
  eq(position.from_lsp(line, 3, 'utf-32'), 7)
  eq(position.from_lsp(line, 99, 'utf-16'), #line)
end

tests['config: defaults, overrides, and bad values fall back with a message'] = function()
  local resolved, problems = config.resolve(nil)
  eq(resolved.keymaps.accept, '<Tab>')
  eq(problems, {})
  resolved, problems =
    config.resolve({ keymaps = { accept = '<C-y>', dismiss = false }, settings = { device = 'cpu' } })
  eq(
    { resolved.keymaps.accept, resolved.keymaps.dismiss, resolved.keymaps.accept_word },
    { '<C-y>', false, '<M-Right>' }
  )
  eq(resolved.settings, { device = 'cpu' })
  eq(problems, {})
  resolved, problems = config.resolve({ debounce_ms = 'soon', cmd = {}, colour = 'red', use_builtin = 'yes' })
  eq(resolved.debounce_ms, 0)
  eq(resolved.cmd, { 'specls', 'serve' })
  eq(resolved.use_builtin, 'auto')
  eq(#problems, 4, 'problem count')
  local _, not_a_table = config.resolve('cpu')
  eq(#not_a_table, 1)
end

tests['ghost: one line at the cursor, the rest as virtual lines'] = function()
  local bufnr = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { 'x = foo()' })
  ghost.show(bufnr, 0, 8, 'a, b', 'Comment')
  eq(ghost.get(bufnr), { row = 0, col = 8, text = 'a, b' })
  local mark = vim.api.nvim_buf_get_extmarks(bufnr, ghost.ns, 0, -1, { details = true })[1][4]
  if vim.fn.has('nvim-0.10') == 1 then
    eq(mark.virt_text_pos, 'inline')
  else -- overlay the suggestion and then the rest of the line, which it pushes right
    eq(mark.virt_text_pos, 'overlay')
    eq(mark.virt_text[2][1], ')')
  end
  ghost.show(bufnr, 0, 9, '\n    return 1\n', 'Comment')
  eq(ghost.get(bufnr), { row = 0, col = 9, text = '\n    return 1\n' })
  eq(#vim.api.nvim_buf_get_extmarks(bufnr, ghost.ns, 0, -1, {}), 1, 'one extmark at a time')
  ghost.clear(bufnr)
  eq(ghost.get(bufnr), nil)
end

tests['status: loading, warming with the share cached, generating, ready, errors'] = function()
  local server = require('specls.server')
  local specls = require('specls')
  local saved = server.status
  server.status = { state = 'loading', message = 'loading model' }
  eq(specls.status(), 'specls loading')
  server.status = { state = 'ready', warmCached = 0.4 }
  eq(specls.status(), 'specls warming 40%')
  server.status = { state = 'ready', generating = true, lastLatencyMs = 41.6 }
  eq(specls.status(), 'specls generating 42ms')
  server.status = { state = 'ready', warmCached = 1, lastLatencyMs = 12, acceptanceRate = 0.5 }
  eq(specls.status(), 'specls ready 12ms 50%')
  server.status = { state = 'ready', lastError = 'completion failed: boom' }
  eq(specls.status(), 'specls ready (completion failed: boom)')
  server.status = { state = 'error', message = 'model failed to load' }
  eq(specls.status(), 'specls error model failed to load')
  server.status = saved
end

local result = { passed = 0, failures = {} }
for name, test in pairs(tests) do
  local ok, err = pcall(test)
  if ok then
    result.passed = result.passed + 1
  else
    table.insert(result.failures, name .. ': ' .. tostring(err))
  end
end
local file = assert(io.open(vim.env.SPECLS_UNIT_RESULT, 'w'))
file:write(vim.fn.json_encode(result))
file:close()
vim.cmd('qa!')
