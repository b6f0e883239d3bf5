<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\Tests\Support\TempDirTestCase;

use function Tokenlock\increment;
use function Tokenlock\readCounter;

/**
 * The shared table of error cases (tests/bindings/cases): the Perl and
 * Python suites run the same table, so the three modules agree on the name
 * of every error.
 */
final class CasesTest extends TempDirTestCase
{
    private const HELD_TOKENS = [
        'lockfile.4102444800000000.h-0000abcd.1.1.0000000000000001',
        'lockfile.4102444800000000.h-0000abcd.1.1.0000000000000002',
    ];
    /** Linux's errno values for the symbols the table may name. */
    private const ERRNO = ['ENOENT' => 2, 'EIO' => 5, 'EACCES' => 13, 'EISDIR' => 21, 'ENOSPC' => 28, 'EOVERFLOW' => 75];

    private ?Lock $handle = null;

    /** @return array<string, array{0: string, 1: string, 2: string}> */
    public static function cases(): array
    {
        $path = dirname(__DIR__, 3) . '/tests/bindings/cases';
        $cases = [];
        foreach (file($path, FILE_IGNORE_NEW_LINES) as $number => $line) {
            $line = trim($line);
            if ($line === '' || $line[0] === '#') {
                continue;
            }
            $fields = preg_split('/\s+/', $line);
            if (count($fields) !== 4) {
                throw new \RuntimeException("$path:" . ($number + 1) . ": not NAME SET-UP OPERATION EXPECTED: $line");
            }
            $cases[$fields[0]] = [$fields[1], $fields[2], $fields[3]];
        }
        return $cases;
    }

    public function testTheTableHasEveryCaseTheModulesMustAgreeOn(): void
    {
        $names = array_keys(self::cases());
        foreach (['busy', 'timed_out', 'lock_lost', 'not_owner', 'corrupt_data', 'overflow', 'untrusted',
                  'bad_argument', 'missing_counter', 'token_missing', 'lock_corrupt'] as $needed) {
            $this->assertContains($needed, $names);
        }
    }

    /** @dataProvider cases */
    public function testEveryCaseOfTheSharedTable(string $setUp, string $operation, string $expected): void
    {
        try {
            $this->setUpCase($setUp);
            $before = $this->snapshot();
            $got = $this->outcome($operation);
            $this->assertSame($expected, $got);
            if (!str_starts_with($got, 'value:')) {
                $this->assertSame($before, $this->snapshot(), 'the failure changed something');
            }
        } finally {
            if ($this->handle !== null && $this->handle->isHeld()) {
                try {
                    $this->handle->release();
                } catch (Exception $e) {
                }
            }
            if (is_dir("$this->dir/L")) {
                chmod("$this->dir/L", 0755);
            }
        }
    }

    private function setUpCase(string $what): void
    {
        $lock = "$this->dir/L";
        if ($what === '-') {
            return;
        } elseif ($what === 'held') {
            $this->handle = Lock::acquire($lock, ['wait' => 0]);
        } elseif ($what === 'taken_over') {
            $this->handle = Lock::acquire($lock, ['wait' => 0]);
            rename("$lock/" . $this->handle->token(), "$lock/lockfile");
        } elseif ($what === 'released') {
            $this->handle = Lock::acquire($lock, ['wait' => 0]);
            $this->handle->release();
        } elseif (str_starts_with($what, 'counter=')) {
            file_put_contents("$this->dir/C", substr($what, strlen('counter=')) . "\n");
        } elseif ($what === 'world_writable') {
            mkdir("$lock/lockfile", 0755, true);
            chmod($lock, 0777);
        } elseif ($what === 'no_token') {
            mkdir($lock);
            touch("$lock/stray");
        } elseif ($what === 'two_tokens') {
            foreach (self::HELD_TOKENS as $token) {
                mkdir("$lock/$token", 0755, true);
            }
        } else {
            throw new \RuntimeException("unknown set-up $what");
        }
    }

    /** The value the operation returned (null for none). */
    private function operate(string $what): int|string|null
    {
        $lock = "$this->dir/L";
        switch ($what) {
            case 'try_lock':
                Lock::acquire($lock, ['wait' => 0])->release();
                return null;
            case 'wait_lock':
                Lock::acquire($lock, ['wait' => 0.2])->release();
                return null;
            case 'lock_lease_0':
                Lock::acquire($lock, ['wait' => 0, 'lease' => 0])->release();
                return null;
            case 'release':
                $this->handle->release();
                return null;
            case 'refresh':
                $this->handle->refresh();
                return null;
            case 'increment':
                return increment("$this->dir/C", ['wait' => 0]);
            case 'read_counter':
                return readCounter("$this->dir/C");
        }
        throw new \RuntimeException("unknown operation $what");
    }

    /** What came out, in the table's words. */
    private function outcome(string $operation): string
    {
        try {
            $value = $this->operate($operation);
        } catch (Exception $e) {
            if ($e->getError() === 'system') {
                $symbol = array_search($e->getErrno(), self::ERRNO, true);
                return 'system:' . ($symbol === false ? (string) $e->getErrno() : $symbol);
            }
            return $e->getError();
        } catch (\InvalidArgumentException $e) {
            return 'bad_argument';
        } catch (\LogicException $e) {
            // Lock::refresh() after release(): this module's not_owner.
            return 'not_owner';
        }
        return $value === null ? 'value:none' : "value:$value";
    }

    /** The counter's contents (null when missing) and the entries of L. */
    private function snapshot(): array
    {
        $counter = is_file("$this->dir/C") ? file_get_contents("$this->dir/C") : null;
        $entries = is_dir("$this->dir/L") ? array_values(array_diff(scandir("$this->dir/L"), ['.', '..'])) : null;
        return [$counter, $entries];
    }
}
