<?php
// The conformance driver of the PHP module (bindings/php/src, loaded from
// its sources by bindings/php/autoload.php),
// through its public API only: the line protocol of
// tests/conformance/README.md on stdin and stdout.

declare(strict_types=1);

require __DIR__ . '/../../bindings/php/autoload.php';

$handle = null;

function counted(int|string|null $value): string
{
    return $value === null ? 'ok none' : "ok $value";
}

function operate(array $w): string
{
    global $handle;
    switch ($w[0]) {
        case 'ping':
            return 'ok';
        case 'acquire':
            $mode = $w[4] ?? '';
            $options = ['wait' => $w[2] / 1000, 'lease' => $w[3] / 1000];
            if ($mode === 'shared') {
                $options['shared'] = true;
            } elseif (str_starts_with($mode, 'slots=')) {
                $options['slots'] = (int) substr($mode, 6);
            } elseif ($mode !== '') {
                return 'error bad_argument';
            }
            $handle = \Tokenlock\Lock::acquire($w[1], $options);
            return 'ok';
        case 'release':
            $handle->release();
            return 'ok';
        case 'refresh':
            $handle->refresh($w[1] / 1000);
            return 'ok';
        case 'update':
            // writeFile with a lock is the module's fenced update.
            \Tokenlock\writeFile($w[1], $w[2], ['lock' => $w[1] . '.lock', 'wait' => 0]);
            return 'ok';
        case 'increment':
            return counted(\Tokenlock\increment($w[1], ['wait' => $w[2] / 1000]));
        case 'read':
            return counted(\Tokenlock\readCounter($w[1]));
        case 'write':
            \Tokenlock\writeFile($w[1], $w[2]);
            return 'ok';
        case 'holders':
            $words = array_map(fn (array $h) => $h['mode'] === 'slot' ? "slot/{$h['slots']}" : $h['mode'],
                array_filter(\Tokenlock\holders($w[1]), fn (array $h) => !$h['stale'] || $h['mode'] === 'waiting'));
            sort($words);
            return $words === [] ? 'ok free' : 'ok ' . implode(',', $words);
        case 'holder':
            $h = \Tokenlock\holder($w[1]);
            return $h === null ? 'ok free'
                : 'ok ' . $h['owner'] . ($h['stale'] ? ',stale' : '') . ($h['legacy'] ? ',legacy' : '');
    }
    return "unsupported {$w[0]}: not in the PHP module's API";
}

function answer(array $w): string
{
    try {
        return operate($w);
    } catch (\Tokenlock\Exception $e) {
        $name = $e->getError();
        return $name === 'system' ? 'error system ' . $e->getErrno() : "error $name";
    } catch (\InvalidArgumentException $e) {
        // The module refuses an argument before anything runs.
        return 'error bad_argument';
    } catch (\LogicException $e) {
        // Lock::refresh() after release(): the module's not_owner.
        return 'error not_owner';
    }
}

while (($line = fgets(STDIN)) !== false) {
    $w = preg_split('/\s+/', trim($line));
    if ($w[0] === '' || $w[0] === 'quit') {
        break;
    }
    echo answer($w), "\n";
}
